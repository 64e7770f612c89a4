"""Differential test: real packets through generated policy vs the reference.

Hypothesis draws complete policy states (tests/kernel/policy_gen.py: rules
over every match field, tiers with pass and end-of-tier actions, profiles,
IP sets that exist or not, protocols as names or numbers); the driver
programs each one on a real node; probes cross it in both families over
TCP, UDP and ICMP at every port-range edge; and every verdict must equal
what tests/reference_eval.py, the plain-Python statement of Felix's
semantics, decides. A renderer bug, a conversion bug or a rule the kernel
refused (quarantined: fail-closed) all show up as a disagreement, which
Hypothesis then shrinks to a small policy.

One driver serves every round: a round replaces the whole state (updates
for what it has, removes for what it lacks), the test waits for a marker
the same apply writes last (a port naming the round in pod ``c``'s
policy, in the IPv6 filter table), then flushes conntrack so no earlier flow is "established".

DP_DIFF_ROUNDS raises the number of rounds (default 8) and DP_DIFF_SEED
changes the fixed seed (CI is repeatable); a failing round is printed with
every disagreement and the reference's reason, and can be replayed by
seed. Not shrunk: every example costs seconds of real packets.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from google.protobuf.message import Message
from hypothesis import HealthCheck, Phase, given, seed, settings

from dataplane.model import (
    Action,
    Policy,
    PolicyKey,
    Profile,
    Rule,
    TierInfo,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)
from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.topology import Namespace, Node, Pod, Topology
from tests.felix_harness import FelixHarness
from tests.kernel import policy_gen as gen
from tests.kernel import scenario
from tests.kernel.marks import requires_root
from tests.kernel.ruleset import our_rules
from tests.reference_eval import Packet, PolicyState, endpoint_decision, forward_decision

pytestmark = [requires_root, pytest.mark.slow]

ROUNDS = int(os.environ.get("DP_DIFF_ROUNDS", "8"))
SEED = int(os.environ.get("DP_DIFF_SEED", "20261123"))
ALLOW_TIMEOUT, DENY_TIMEOUT = 3.0, 0.6
EPHEMERAL = 40000  # what the reference assumes for a probe from an ephemeral port
C_PROFILE = "kns.diff-open"
BARRIER = PolicyKey("barrier", "diff", "NetworkPolicy")
BARRIER_TIER = TierInfo("default", (BARRIER,), (), Action.DENY)
BARRIER_PORT = 20000  # + the round: far from every generated port
OPEN_POLICY = Policy("default", (Rule(Action.ALLOW),), (), namespace="diff")  # as c's judge sees it
OPEN_PROFILE = Profile((Rule(Action.ALLOW),), (Rule(Action.ALLOW),))


def endpoint_key(pod: str) -> WorkloadEndpointKey:
    return WorkloadEndpointKey("k8s", f"diff/{pod}", "eth0")


@dataclass(frozen=True)
class Probe:
    src: str  # a pod or "external"
    dst: str  # a pod with generated policy: a or b
    packet: Packet

    def __str__(self) -> str:
        return f"{self.src} -> {self.dst}: {self.packet}"


class DiffNode:
    """A node with pods a, b (generated policy), c (open) and the driver."""

    def __init__(self, topology: Topology) -> None:
        self.node: Node = topology.add_node()
        self.pods: dict[str, Pod] = {}
        for name, (v4, v6) in gen.ADDRESSES.items():
            pod = self.node.add_pod(name, v4, v6)
            if name != "c":
                for port in range(gen.DST_WINDOW[0], gen.DST_WINDOW[1] + 1):
                    pod.listen("tcp", port)
                    pod.listen("udp", port)
            self.pods[name] = pod
        self.round = 0
        self.previous: gen.Round | None = None
        self.felix = FelixHarness("--platform", "linux", netns=self.node.netns)
        self.felix.send(
            scenario.config(),
            pb.IPAMPoolUpdate(id="pool-v4", pool=pb.IPAMPool(cidr="10.65.0.0/16")),
            pb.IPAMPoolUpdate(id="pool-v6", pool=pb.IPAMPool(cidr="fd00:10:65::/48")),
            pb.ActiveProfileUpdate(
                id=pb.ProfileID(name=C_PROFILE),
                profile=pb.Profile(
                    inbound_rules=[pb.Rule(action="allow")],
                    outbound_rules=[pb.Rule(action="allow")],
                ),
            ),
            self._barrier_pb(),
            *(self._endpoint_pb(name, (), ()) for name in ("a", "b")),
            self._endpoint_pb("c", (C_PROFILE,), (BARRIER_TIER,)),
            pb.InSync(),
        )
        self.felix.recv_until("dataplane_in_sync", timeout=60)
        self.felix.drain()

    def close(self) -> str:
        self.felix.close_input()
        _, stderr = self.felix.wait()
        return stderr

    # --- programming a round ---------------------------------------------------

    def _barrier_pb(self) -> pb.ActivePolicyUpdate:
        """Pod c's policy: allows everything, and names the round in a port."""
        marker = pb.PortRange(first=BARRIER_PORT + self.round, last=BARRIER_PORT + self.round)
        return pb.ActivePolicyUpdate(
            id=gen.policy_key_pb(BARRIER),
            policy=pb.Policy(
                tier="default",
                namespace=BARRIER.namespace,
                inbound_rules=[
                    pb.Rule(action="allow", protocol=pb.Protocol(name="tcp"), dst_ports=[marker]),
                    pb.Rule(action="allow"),
                ],
            ),
        )

    def _endpoint_pb(
        self, pod: str, profiles: tuple[str, ...], tiers: tuple[TierInfo, ...]
    ) -> pb.WorkloadEndpointUpdate:
        v4, v6 = gen.ADDRESSES[pod]
        key = endpoint_key(pod)
        return pb.WorkloadEndpointUpdate(
            id=pb.WorkloadEndpointID(
                orchestrator_id=key.orchestrator_id,
                workload_id=key.workload_id,
                endpoint_id=key.endpoint_id,
            ),
            endpoint=pb.WorkloadEndpoint(
                state="active",
                name=self.pods[pod].iface,
                profile_ids=list(profiles),
                ipv4_nets=[f"{v4}/32"],
                ipv6_nets=[f"{v6}/128"],
                tiers=gen.endpoint_tiers_pb(tiers),
            ),
        )

    def endpoint(self, pod: str, rnd: gen.Round) -> WorkloadEndpoint:
        """The model value the reference judges (pod ``c``: open)."""
        v4, v6 = gen.ADDRESSES[pod]
        policy = rnd.endpoints.get(pod, gen.EndpointPolicy((BARRIER_TIER,), (C_PROFILE,)))
        return WorkloadEndpoint(
            endpoint_key(pod),
            self.pods[pod].iface,
            profile_ids=policy.profile_ids,
            ipv4_nets=(f"{v4}/32",),
            ipv6_nets=(f"{v6}/128",),
            tiers=policy.tiers,
        )

    def program(self, rnd: gen.Round) -> None:
        """Replace the whole generated state with ``rnd``; wait until it is in."""
        self.round += 1
        msgs: list[Message] = [
            gen.ipset_pb(set_id, members, gen.IPSET_TYPES[set_id])
            for set_id, members in rnd.ipsets.items()
        ]
        msgs += [gen.profile_pb(name, p, rnd) for name, p in rnd.profiles.items()]
        msgs += [gen.policy_pb(key, p, rnd) for key, p in rnd.policies.items()]
        msgs += [
            self._endpoint_pb(pod, ep.profile_ids, ep.tiers) for pod, ep in rnd.endpoints.items()
        ]
        msgs.append(self._barrier_pb())
        old = self.previous
        if old is not None:
            msgs += [
                pb.ActivePolicyRemove(id=gen.policy_key_pb(k))
                for k in old.policies
                if k not in rnd.policies
            ]
            msgs += [
                pb.ActiveProfileRemove(id=pb.ProfileID(name=n))
                for n in old.profiles
                if n not in rnd.profiles
            ]
            msgs += [pb.IPSetRemove(id=s) for s in old.ipsets if s not in rnd.ipsets]
        self.previous = rnd
        self.felix.send(*msgs)
        self._wait_for_marker(BARRIER_PORT + self.round)
        # Earlier rounds' flows must not be "established" in this one.
        self.node.run("conntrack", "-F", check=False)

    def _wait_for_marker(self, port: int, deadline: float = 30.0) -> None:
        """Until a rule for ``port`` is in force (either backend's spelling)."""
        marker = re.compile(rf"dports? (?:\{{ )?{port}\b")
        end = time.monotonic() + deadline
        while not marker.search(our_rules(self.node)):
            if time.monotonic() > end:
                tail = self.felix.stderr_so_far()[-3000:]
                raise AssertionError(f"round {self.round} not applied in time; driver:\n{tail}")

    # --- probing ---------------------------------------------------------------

    def probes(self, rnd: gen.Round) -> Iterator[Probe]:
        for src in ("a", "b", "c", "external"):
            for dst in ("a", "b"):
                if src == dst:
                    continue
                for family in (0, 1):
                    s = gen.EXTERNAL[family] if src == "external" else gen.ADDRESSES[src][family]
                    d = gen.ADDRESSES[dst][family]
                    icmp = ("icmp", 8) if family == 0 else ("icmpv6", 128)
                    yield Probe(src, dst, Packet(s, d, icmp[0], icmp_type=icmp[1], icmp_code=0))
                    for proto in ("tcp", "udp"):
                        for port in rnd.dst_ports:
                            yield Probe(src, dst, Packet(s, d, proto, EPHEMERAL, port))
                        for sport in rnd.src_ports:
                            yield Probe(src, dst, Packet(s, d, proto, sport, rnd.dst_ports[0]))

    def expected(self, probe: Probe, rnd: gen.Round) -> tuple[bool, str]:
        # Pod c's own policy and profile are part of the node's state too.
        state = PolicyState(
            {**rnd.policies, BARRIER: OPEN_POLICY},
            {**rnd.profiles, C_PROFILE: OPEN_PROFILE},
            rnd.ipsets,
        )
        dst = self.endpoint(probe.dst, rnd)
        if probe.src == "external":
            decision = endpoint_decision(dst, "ingress", probe.packet, state)
        else:
            decision = forward_decision(self.endpoint(probe.src, rnd), dst, probe.packet, state)
        return decision.allowed, decision.reason

    def _ns(self, name: str) -> Namespace:
        return self.node.external if name == "external" else self.pods[name]

    def verdict(self, probe: Probe, expect: bool) -> bool:
        ns, packet = self._ns(probe.src), probe.packet
        timeout = ALLOW_TIMEOUT if expect else DENY_TIMEOUT
        if packet.icmp_type is not None:
            return ns.ping(packet.dst, timeout=timeout)
        sport = None if packet.src_port == EPHEMERAL else packet.src_port
        port = packet.dst_port or 0
        if packet.protocol == "tcp":
            return ns.connect("tcp", packet.dst, port, timeout, sport=sport).ok
        return ns.connect("udp", packet.dst, port, timeout, sport=sport).ok

    def disagreements(self, rnd: gen.Round) -> list[str]:
        probes = list(dict.fromkeys(self.probes(rnd)))
        expected = [self.expected(p, rnd) for p in probes]
        with ThreadPoolExecutor(max_workers=16) as pool:
            got = list(pool.map(self.verdict, probes, [e for e, _ in expected]))
        return [
            f"{p}: kernel {'allowed' if g else 'dropped'}, reference: "
            f"{'allow' if e else 'drop'} ({why})"
            for p, g, (e, why) in zip(probes, got, expected, strict=True)
            if g != e
        ]


def describe(rnd: gen.Round) -> str:
    lines = [f"ipsets: {dict(rnd.ipsets)}"]
    for key, policy in rnd.policies.items():
        lines.append(f"policy {key}: in={policy.inbound} out={policy.outbound}")
    for name, profile in rnd.profiles.items():
        lines.append(f"profile {name}: in={profile.inbound} out={profile.outbound}")
    lines += [f"endpoint {pod}: {ep}" for pod, ep in rnd.endpoints.items()]
    return "\n".join(lines)


def test_kernel_verdicts_equal_the_reference(topology: Topology) -> None:
    node = DiffNode(topology)
    failed: list[str] = []

    @seed(SEED)
    @settings(
        max_examples=ROUNDS,
        deadline=None,
        database=None,
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(gen.rounds())
    def check(rnd: gen.Round) -> None:
        node.program(rnd)
        wrong = node.disagreements(rnd)
        assert not wrong, "\n".join([describe(rnd), *wrong])

    try:
        check()
    finally:
        stderr = node.close()
        failed = [line for line in stderr.splitlines() if "refused by the kernel" in line]
    assert not failed, "\n".join(failed)


def test_ipblock_with_except_on_real_packets(topology: Topology) -> None:
    # The case: egress to a /4 except one address, which Calico sends
    # as one rule with dst_net and not_dst_net. a may reach c, not b.
    node = DiffNode(topology)
    b4, b6 = gen.ADDRESSES["b"]
    key = PolicyKey("egress-except", "diff", "NetworkPolicy")
    rule = Rule(
        Action.ALLOW,
        dst_nets=("0.0.0.0/4", "::/0"),
        not_dst_nets=(f"{b4}/32", f"{b6}/128"),
    )
    rnd = gen.Round(
        ipsets={},
        policies={key: Policy("default", (), (rule,), namespace="diff")},
        profiles={"kns.diff": Profile((Rule(Action.ALLOW),), ())},
        endpoints={
            "a": gen.EndpointPolicy((TierInfo("default", (), (key,), Action.DENY),)),
            "b": gen.EndpointPolicy(profile_ids=("kns.diff",)),  # only a's egress decides
        },
        dst_ports=(gen.DST_WINDOW[0],),
        src_ports=(),
    )
    try:
        node.program(rnd)
        a = node.pods["a"]
        assert not a.can_connect("tcp", b4, gen.DST_WINDOW[0], timeout=DENY_TIMEOUT)
        assert not a.ping(b6, timeout=DENY_TIMEOUT)
        assert a.ping(gen.ADDRESSES["c"][0], timeout=ALLOW_TIMEOUT)
        assert a.ping(gen.ADDRESSES["c"][1], timeout=ALLOW_TIMEOUT)
        assert node.disagreements(rnd) == []
    finally:
        stderr = node.close()
    assert "refused by the kernel" not in stderr
