"""The driver's life under the real Felix: restarted on a config change, stopped by SIGTERM.

Felix stops its driver (SIGTERM) and exits 129 after a FelixConfiguration
change that it cannot apply live; calico-node's supervisor starts it
again, and the new Felix a new driver, which must adopt the dataplane
without a dropped connection and, when nothing changed, write nothing.
On Felix's own SIGTERM the driver must exit before Felix's SIGKILL (4 s)
and leave the dataplane programmed. This module has a cluster of its own
(:func:`tests.felix.cluster.running`): it restarts Felix.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from testbed.topology import CommandError
from tests.felix.cluster import PROGRAMMED, Cluster, complaints, own_cluster
from tests.waiting import eventually

pytestmark = pytest.mark.slow

FROM_CLIENTS = {
    "podSelector": {"matchLabels": {"app": "web"}},
    "policyTypes": ["Ingress"],
    "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}]}],
}


@pytest.fixture(scope="module")
def restartable(
    felix_setup: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A cluster of this module's own, with alpha's web open to its clients only."""
    with own_cluster(felix_setup, tmp_path_factory, "lifecycle") as made:
        made.netpol("alpha", FROM_CLIENTS)
        made.expect({("client", "web"): True, ("other", "web"): False})
        yield made


def _driver_in_sync(cluster: Cluster) -> bool:
    """The driver now running answers on /metrics and has programmed a full snapshot."""
    try:
        return cluster.metric("dataplane_in_sync") == 1
    except CommandError:  # between two drivers: nothing listens
        return False


def test_a_config_change_restarts_felix_and_its_driver_without_a_dropped_connection(
    restartable: Cluster,
) -> None:
    cluster = restartable
    before = cluster.rules()
    held = cluster.pods["client"].hold("tcp", cluster.pods["web"].ipv4, 8080)
    cluster.calico.apply(
        {
            "apiVersion": "projectcalico.org/v3",
            "kind": "FelixConfiguration",
            "metadata": {"name": "default"},
            "spec": {"iptablesRefreshInterval": "120s"},
        }
    )
    failed: list[str] = []
    deadline = time.monotonic() + PROGRAMMED
    restarted = False
    # Play calico-node's supervisor, and probe all the way through.
    while not (restarted and _driver_in_sync(cluster)):
        assert time.monotonic() < deadline, f"no restart; Felix's log {cluster.felix.log_path}"
        if not cluster.reaches("client", "web"):
            failed.append("client->web refused")
        if cluster.reaches("other", "web"):
            failed.append("other->web let through")
        restarted = restarted or cluster.felix.restart_if_exited()
    assert cluster.felix.exits == [129]  # Felix's exit for a config change
    assert failed == []
    assert held.check(), "the connection held through the restart broke"
    held.close()
    assert complaints(cluster.felix.log()) == []  # at the restart too
    # The new driver adopted the dataplane: not one rule written.
    assert cluster.rules() == before
    assert cluster.lines_written() == 0


def test_on_felix_sigterm_the_driver_exits_in_time_and_the_dataplane_stays(
    restartable: Cluster,
) -> None:
    cluster = restartable
    cluster.expect({("client", "web"): True, ("other", "web"): False})
    code = cluster.felix.stop()
    log = cluster.felix.log()
    assert "Driver shut down after SIGTERM" in log
    assert "Driver did not respond to SIGTERM" not in log
    assert code != 0  # Felix's own FATAL "Exiting immediately"
    eventually(lambda: not _driver_in_sync(cluster), 5, "the driver gone")
    # Nobody programs the node now; what was programmed holds.
    cluster.expect({("client", "web"): True, ("other", "web"): False}, deadline=2)
