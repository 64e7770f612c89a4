"""What the reflector relies on, held against the fake API server and the real one.

Each test runs twice: on tests/kube/fake_apiserver.py and on the real
kube-apiserver of the test bed (with the watch cache off, so that a watch
from a compacted version is 410 at once, as etcd answers it). The
reflector's own tests use the fake; this suite is what makes that fair.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dataplane.kube.api import ExpiredError, WatchEvent
from testbed.control_plane import ControlPlane, unavailable
from testbed.topology import Topology
from tests.kernel.marks import KERNEL_UNAVAILABLE
from tests.kube.clusters import Cluster, FakeCluster, RealCluster, service

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    if KERNEL_UNAVAILABLE is not None:
        pytest.skip(KERNEL_UNAVAILABLE)
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    workdir = Path(tmp_path_factory.mktemp("contract"))
    with Topology() as topo, ControlPlane(topo, workdir, watch_cache=False) as cp:
        yield RealCluster(cp)


@pytest.fixture(params=["fake", "real"])
def cluster(request: pytest.FixtureRequest) -> Cluster:
    if request.param == "fake":
        return FakeCluster()
    real: RealCluster = request.getfixturevalue("real_cluster")
    return real


def _path(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/services"


def test_a_paged_list_is_one_snapshot(cluster: Cluster) -> None:
    ns = cluster.namespace()
    for i in range(5):
        cluster.create(service(ns, f"s{i}"))

    async def main() -> None:
        api = cluster.client()
        try:
            first = await api.list_page(_path(ns), {"limit": "2"})
            assert len(first.items) == 2 and first.continue_token
            cluster.create(service(ns, "late"))  # after the snapshot: not in it
            names = [o["metadata"]["name"] for o in first.items]
            token = first.continue_token
            while token:
                page = await api.list_page(_path(ns), {"limit": "2", "continue": token})
                names += [o["metadata"]["name"] for o in page.items]
                token = page.continue_token
            assert names == [f"s{i}" for i in range(5)]
        finally:
            await api.aclose()

    cluster.run(main)


def test_a_watch_from_a_list_sees_every_later_change_in_order(cluster: Cluster) -> None:
    ns = cluster.namespace()
    cluster.create(service(ns, "a"))

    async def main() -> None:
        api = cluster.client()
        try:
            listed = await api.list_page(_path(ns), {})
            cluster.create(service(ns, "b"))
            changed = service(ns, "a", tier="web")
            cluster.update(changed)
            cluster.delete(ns, "b")
            seen: list[WatchEvent] = []
            params = {"resourceVersion": listed.resource_version}
            async with api.watch(_path(ns), params, timeout_seconds=5) as events:
                async for event in events:
                    seen.append(event)
                    if len(seen) == 3:
                        break
            summary = [(e.type, e.object["metadata"]["name"]) for e in seen]
            assert summary == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
            assert seen[1].object["metadata"]["labels"] == {"tier": "web"}
            versions = [int(e.object["metadata"]["resourceVersion"]) for e in seen]
            assert versions == sorted(versions) and versions[0] > int(listed.resource_version)
        finally:
            await api.aclose()

    cluster.run(main)


def test_kube_proxy_s_selector_leaves_out_headless_and_other_proxies(cluster: Cluster) -> None:
    ns = cluster.namespace()
    cluster.create(service(ns, "plain"))
    cluster.create(service(ns, "headless", **{"service.kubernetes.io/headless": ""}))
    cluster.create(service(ns, "other", **{"service.kubernetes.io/service-proxy-name": "x"}))
    selector = "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless"

    async def main() -> None:
        api = cluster.client()
        try:
            page = await api.list_page(_path(ns), {"labelSelector": selector})
            assert [o["metadata"]["name"] for o in page.items] == ["plain"]
            cluster.create(service(ns, "later-headless", **{"service.kubernetes.io/headless": ""}))
            cluster.create(service(ns, "later"))
            params = {"resourceVersion": page.resource_version, "labelSelector": selector}
            async with api.watch(_path(ns), params, timeout_seconds=5) as events:
                first = await anext(aiter(events))
            assert (first.type, first.object["metadata"]["name"]) == ("ADDED", "later")
        finally:
            await api.aclose()

    cluster.run(main)


def test_a_watch_from_before_a_compaction_is_410(cluster: Cluster) -> None:
    ns = cluster.namespace()
    cluster.create(service(ns, "a"))

    async def main() -> None:
        api = cluster.client()
        try:
            old = (await api.list_page(_path(ns), {})).resource_version
            cluster.create(service(ns, "b"))
            cluster.compact()
            params = {"resourceVersion": old}
            with pytest.raises(ExpiredError) as info:
                async with api.watch(_path(ns), params, timeout_seconds=5) as events:
                    async for _event in events:
                        pass
            assert info.value.status == 410
        finally:
            await api.aclose()

    cluster.run(main)


def test_a_watch_ends_when_its_timeout_does(cluster: Cluster) -> None:
    ns = cluster.namespace()

    async def main() -> None:
        api = cluster.client()
        try:
            version = (await api.list_page(_path(ns), {})).resource_version
            params = {"resourceVersion": version}
            async with api.watch(_path(ns), params, timeout_seconds=1) as events:
                assert [e async for e in events] == []
        finally:
            await api.aclose()

    cluster.run(main)
