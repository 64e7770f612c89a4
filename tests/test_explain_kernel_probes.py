"""explain agrees with every pod-to-pod probe of the kernel policy tests, naming the rule.

``tests/kernel/test_linux_policy.py`` checks each probe of its matrix with
real packets on both iptables backends; here the same messages are
replayed in memory and ``explain`` must give every probe's verdict, with
a deciding step that is a rule, an end of tier or a profile (never a
default it could not explain). The host's own probes are left out: the
node's address is the test topology's, not part of the messages.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from dataplane.core.loop import Dataplane
from dataplane.ops.explain import explain
from dataplane.ops.metrics import Metrics
from dataplane.ops.observer import Observer
from dataplane.sim import SimPlatform
from dataplane.sim.platform import SimState
from tests.kernel import scenario
from tests.kernel.cluster import Probe
from tests.kernel.test_linux_policy import matrix

PROBES = [p for p in matrix() if p.src != "node"]


@pytest.fixture(scope="module")
def state() -> SimState:
    ifaces = {p.name: f"cali{p.name.replace('-', '')}" for p in scenario.PODS}
    observer = Observer(SimPlatform(), metrics=Metrics(process=False))
    dataplane = Dataplane(observer.platform, observer=observer)
    for msg in scenario.node_messages(ifaces):
        dataplane.send_message(msg)
    dataplane.close_input()
    trio.run(dataplane.run)
    return observer.platform.publish().state


def _address(name: str, family: int) -> str:
    pod = scenario.pod(name)
    return pod.ipv4 if family == 4 else pod.ipv6


@pytest.mark.parametrize("probe", PROBES, ids=str)
def test_explain_gives_the_kernels_verdict(state: SimState, probe: Probe) -> None:
    icmp = probe.proto == "icmp"
    said: dict[str, Any] = explain(
        state,
        _address(probe.src, probe.family),
        _address(probe.dst, probe.family),
        ("icmpv6" if probe.family == 6 else "icmp") if icmp else probe.proto,
        None if icmp else probe.port,
    ).to_json()
    assert said["verdict"] == ("allow" if probe.expect else "deny")
    decided = said["decided_by"]
    assert decided["direction"] in {"egress", "ingress"}
    assert isinstance(decided["rule"], int) or decided["rule"] in {"end-of-tier", "profile"}
    deciding = said["steps"][-1]
    assert (deciding["outcome"], deciding["rule"]) == (said["verdict"], decided["rule"])
