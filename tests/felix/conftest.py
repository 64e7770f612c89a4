"""Under the real Felix: one Calico cluster per release and backend, shared by the session.

``cluster`` (:mod:`tests.felix.cluster`) runs the real etcd, kube-apiserver and
kube-controller-manager, installs the release's CRDs, and starts that
release's calico-felix in KDD mode on a node namespace with our
``dataplane-driver`` as its DataplaneDriver, on iptables
(``FELIX_NFTABLESMODE=Disabled``) and on nftables (``Enabled``). Pods are
made by the release's CNI plugin with Calico IPAM.

Releases: the pinned one (v3.31.7) and the newest (master) by default;
``DATAPLANE_TEST_FELIX_RELEASES=all`` (``make test-releases``) or a comma
list of archive labels picks others. A binary that is missing skips with
the builder's words (no Go, not built yet).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from testbed.upstream import calico
from tests.felix.cluster import Cluster, own_cluster

BACKENDS = {"iptables": "Disabled", "nftables": "Enabled"}


def releases() -> list[str]:
    wanted = os.environ.get("DATAPLANE_TEST_FELIX_RELEASES", "")
    if wanted == "all":
        try:
            return [a.label for a in calico.archives()]
        except calico.ArchiveError:
            return [calico.PINNED, calico.NEWEST]
    if wanted:
        return [w.strip() for w in wanted.split(",") if w.strip()]
    return [calico.PINNED, calico.NEWEST]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "felix_setup" in metafunc.fixturenames:
        params = [(r, b) for r in releases() for b in BACKENDS]
        metafunc.parametrize(
            "felix_setup",
            params,
            ids=[f"{r}-{b}" for r, b in params],
            indirect=True,
            scope="session",
        )


@pytest.fixture(scope="session")
def felix_setup(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(release, FELIX_NFTABLESMODE value) of the tests that use it."""
    release, backend = request.param
    return release, BACKENDS[backend]


@pytest.fixture(scope="session")
def cluster(
    felix_setup: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """The cluster the session's tests of this release and backend share."""
    with own_cluster(felix_setup, tmp_path_factory, "felix") as made:
        yield made
