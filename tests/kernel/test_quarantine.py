"""One object the kernel refuses never stalls the node (real kernel, packets).

The test hook is the kernel tool itself: the driver runs with a PATH whose
``*tables-*-restore`` refuse any input line mentioning port 7777
(``tests/kernel/refusing_tools.py``). A policy using that port is then
exactly "an object the kernel refuses".
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.topology import Topology
from tests.felix_harness import FelixHarness
from tests.kernel import scenario
from tests.kernel.cluster import Cluster, Probe
from tests.kernel.marks import requires_root
from tests.kernel.refusing_tools import (
    MARKER,
    refused_policy,
    refusing_env,
    using_refused_policy,
)

pytestmark = [requires_root, pytest.mark.slow]


@pytest.fixture
def refusing_path(tmp_path: Path) -> dict[str, str]:
    """An environment whose restore tools refuse lines with the marker."""
    return refusing_env(tmp_path, MARKER)


def _statuses_until(
    felix: FelixHarness,
    wanted: dict[str, str],
    timeout: float = 20.0,
    already: list[pb.FromDataplane] = [],  # noqa: B006 - read only
) -> None:
    """Read status updates until every workload in ``wanted`` has that status."""
    seen: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    pending = list(already)
    while any(seen.get(k) != v for k, v in wanted.items()):
        env = pending.pop(0) if pending else felix.recv(max(0.1, deadline - time.monotonic()))
        if env.HasField("workload_endpoint_status_update"):
            update = env.workload_endpoint_status_update
            seen[update.id.workload_id] = update.status.status


def test_refused_policy_is_quarantined_and_the_node_carries_on(
    topology: Topology, refusing_path: dict[str, str]
) -> None:
    cluster = Cluster(topology)
    db = cluster.ifaces["db-1"]
    felix = FelixHarness("--platform", "linux", netns=cluster.node.netns, env=refusing_path)
    felix.send(
        *scenario.node_messages(
            cluster.ifaces,
            extra=[refused_policy(int(MARKER)), using_refused_policy(db)],
            IptablesBackend="nft",
        )
    )
    try:
        first = felix.recv_until("dataplane_in_sync", timeout=60)
        # The first apply landed all the rest; db-1's refused policy is
        # fail-closed (it would have allowed 7777 only, and it was first in
        # db-1's tier, so now it drops what reaches it: api -> db 5432 too).
        _statuses_until(felix, {"backend/db-1": "error", "backend/api-1": "up"}, already=first)
        assert (
            cluster.failures(
                [
                    Probe("web-1", "api-1", "tcp", 8080, 4, True),
                    Probe("api-1", "db-1", "tcp", 5432, 4, False),
                    Probe("db-1", "web-1", "tcp", 80, 4, True),
                ]
            )
            == []
        )

        # While it is quarantined, a new pod and an unrelated policy change
        # land within one apply.
        extra = cluster.add_pod(scenario.EXTRA.name)
        felix.send(
            scenario.endpoint(scenario.EXTRA, extra.iface),
            pb.ActivePolicyUpdate(
                id=scenario.MON_TO_API,
                policy=pb.Policy(
                    tier="default",
                    namespace="backend",
                    inbound_rules=[
                        pb.Rule(action="allow", src_ip_set_ids=[scenario.SET_MON]),
                    ],
                ),
            ),
        )
        _statuses_until(felix, {"backend/api-3": "up"})
        # (both are allowed only by the changed policy, which was 9090-9091)
        cluster.wait_for(Probe("prom-1", "api-3", "tcp", 80, 4, True))
        cluster.wait_for(Probe("prom-1", "api-1", "tcp", 80, 4, True))

        # Fixing the object takes it out of quarantine.
        felix.send(refused_policy(7778))
        _statuses_until(felix, {"backend/db-1": "up"})
        cluster.wait_for(Probe("api-1", "db-1", "tcp", 5432, 4, True))
    finally:
        felix.close_input()
        code, err = felix.wait()
    assert code == 0, err
    # One line per refused chain (here one per IP version), naming the
    # object, the message's rule and the kernel's words.
    refused = [line for line in err.splitlines() if "refused by the kernel" in line]
    assert len(refused) == 2, err
    for line in refused:
        assert "policy refuse-me inbound rule 0" in line
        assert "refused by the test hook" in line
        assert "fail-closed" in line
