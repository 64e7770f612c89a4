"""Under every supported Felix: each release's session programs what master's does.

For each of v3.30, v3.31, v3.32 and v3.33, the session of
tests/felix_releases/session.py is encoded with that release's own schema
(as its Felix says it) and fed to ``dataplane-driver`` exactly as Felix
starts it: no arguments, pipes on fds 3 and 4, options from DATAPLANE_*
variables, in a fresh node namespace. What the kernel holds then (both
iptables backends, IP sets, our routes) must equal what the same content
in the driver's own (master) encoding programs, and real packets must get
the verdicts the policy says, staged policies and Pass tiers included.
On each backend (iptables, native nftables), against master's on the same.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from dataplane.wire.framing import encode_frame
from testbed.node import calico_iface
from testbed.topology import Node, Topology
from tests.felix_harness import FelixHarness
from tests.felix_releases import RELEASES
from tests.felix_releases.session import after_sync, master_session
from tests.felix_releases.speak import Speaker
from tests.kernel import scenario
from tests.kernel.cluster import Cluster, Probe
from tests.kernel.ruleset import nft_state
from tests.kernel.services import VIP4, served_by
from tests.kernel.test_linux_policy import matrix

DRIVER = Path(sys.executable).parent / "dataplane-driver"
_COUNTERS = re.compile(r"\[\d+:\d+\]")
_INITVAL = re.compile(r" initval 0x[0-9a-f]+")  # the kernel's random hash seed per set
_ROUTE_PROTOCOL = "80"  # ours (dataplane/linux/netlink/routes.py)
# The host-side names testbed.topology gives the pods: the session needs
# them before the node exists.
IFACES = {spec.name: calico_iface(spec.name) for spec in scenario.PODS}


def _kernel_state(node: Node) -> str:
    """What we program, in a form that does not change from run to run."""
    parts = []
    for tool in (
        "iptables-legacy-save",
        "ip6tables-legacy-save",
        "iptables-nft-save",
        "ip6tables-nft-save",
    ):
        saved = node.run(tool).stdout
        lines = [_COUNTERS.sub("", line) for line in saved.splitlines() if line[:1] != "#"]
        parts.append(f"== {tool}\n" + "\n".join(lines))
    ipsets = sorted(
        _INITVAL.sub("", line) for line in node.run("ipset", "save").stdout.splitlines()
    )
    parts.append("== ipset\n" + "\n".join(ipsets))
    parts.append(nft_state(node))
    for family in ("-4", "-6"):
        routes = node.run("ip", family, "route", "show", "table", "all", "proto", _ROUTE_PROTOCOL)
        parts.append(f"== routes {family}\n{routes.stdout}")
    return "\n".join(parts)


def _run(topology: Topology, release: str | None) -> tuple[str, list[str]]:
    """Program a fresh node as ``release``'s Felix would (None: our own encoding).

    Returns what the kernel then holds and the probes that failed.
    """
    session = master_session(IFACES)
    churn = after_sync(len(session) + 1)
    if release is None:
        first, later = (b"".join(encode_frame(e) for e in msgs) for msgs in (session, churn))
    else:
        speaker = Speaker(release)
        first, later = speaker.say(session), speaker.say(churn)
    cluster = Cluster(topology)
    assert cluster.ifaces == IFACES
    env = {**os.environ, "DATAPLANE_SYSCTL_STATE": str(cluster.sysctl_state)}
    felix = FelixHarness(netns=cluster.node.netns, env=env, program=[str(DRIVER)], cwd=Path("/"))
    try:
        felix.send_raw(first)
        felix.recv_until("dataplane_in_sync", timeout=60)
        felix.send_raw(later)
        felix.recv_until("host_endpoint_status_remove", timeout=30)
        probes = [
            *matrix(),
            # The Kubernetes NetworkPolicy (knp.default. up to v3.31).
            *(Probe("prom-1", "db-1", "tcp", 80, family, True) for family in (4, 6)),
            Probe("web-2", "db-1", "tcp", 80, 4, False),
        ]
        failures = cluster.failures(probes)
        served = served_by(cluster.pods["web-1"], VIP4, 80, 4)
        if not set(served) <= {"api-1", "api-2"}:
            failures.append(f"ClusterIP {VIP4}:80 from web-1: {dict(served)}")
        return _kernel_state(cluster.node), failures
    finally:
        felix.kill()


@pytest.fixture(scope="module")
def master_states() -> dict[str, str]:
    """Master's kernel state per backend, programmed once each, when first asked."""
    return {}


@pytest.mark.parametrize("release", RELEASES)
def test_each_release_programs_the_masters_kernel_state_and_verdicts(
    release: str, master_states: dict[str, str], topology: Topology, kernel_backend: str
) -> None:
    if kernel_backend not in master_states:
        with Topology() as fresh:
            master, failures = _run(fresh, None)
        assert failures == []
        master_states[kernel_backend] = master
    state, failures = _run(topology, release)
    assert failures == []
    assert state == master_states[kernel_backend]
