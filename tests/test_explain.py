"""``explain``: which step of a packet's path decides it, over the driver's desired state.

Small hand-built states, whole ``to_json()`` values compared; a Hypothesis
property that the deciding step is real (take it away and the decision
moves later); and the demo node's whole expected matrix. The engine itself
is also the tests' reference evaluator (``tests/reference_eval.py``), so
the kernel and simulated-HNS tests that compare against it hold ``explain``
to what a programmed node does.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.core.loop import Dataplane
from dataplane.model import (
    Action,
    IcmpMatch,
    IPSet,
    IPSetType,
    Policy,
    PolicyKey,
    PortRange,
    Profile,
    Rule,
    TierInfo,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)
from dataplane.model.endpoints import HostEndpoint, HostEndpointKey
from dataplane.model.services import Backend, BackendPort, Service, ServiceKey, ServicePort
from dataplane.ops import evaluate
from dataplane.ops.explain import Explanation, explain
from dataplane.sim import SimPlatform
from dataplane.sim.platform import SimState
from dataplane.wire.transport import FileSource
from examples import demo
from examples.demo_node import LOG_PATH
from testbed.topology import NODE_UPLINK
from tests import reference_eval

ALLOW, DENY, PASS, LOG = Action.ALLOW, Action.DENY, Action.PASS, Action.LOG
OPEN = Profile((Rule(ALLOW),), (Rule(ALLOW),))
OUTSIDE_IP = "192.168.1.1"
HOST_IP = "192.168.56.11"

A_KEY = WorkloadEndpointKey("k8s", "ns/a", "eth0")
B_KEY = WorkloadEndpointKey("k8s", "ns/b", "eth0")
C_KEY = WorkloadEndpointKey("k8s", "ns/c", "eth0")


def key(name: str) -> PolicyKey:
    return PolicyKey(name, "ns", "NetworkPolicy")


def tier(name: str, *policies: str, default: Action = DENY) -> TierInfo:
    keys = tuple(key(p) for p in policies)
    return TierInfo(name, keys, keys, default)


def wep(
    k: WorkloadEndpointKey,
    ipv4: str,
    ipv6: str,
    *,
    tiers: tuple[TierInfo, ...] = (),
    profiles: tuple[str, ...] = (),
    state: str = "active",
) -> WorkloadEndpoint:
    iface = f"cali-{k.workload_id.split('/')[1]}"
    return WorkloadEndpoint(
        k,
        iface,
        state=state,
        ipv4_nets=(f"{ipv4}/32",),
        ipv6_nets=(f"{ipv6}/128",),
        tiers=tiers,
        profile_ids=profiles,
    )


def a(**kw: Any) -> WorkloadEndpoint:
    return wep(A_KEY, "10.0.0.1", "fd00::1", **kw)


def b(**kw: Any) -> WorkloadEndpoint:
    return wep(B_KEY, "10.0.1.5", "fd00::1:5", **kw)


def c(**kw: Any) -> WorkloadEndpoint:
    return wep(C_KEY, "10.0.1.6", "fd00::1:6", **kw)


def node(
    *endpoints: WorkloadEndpoint,
    inbound: dict[str, tuple[Rule, ...]] | None = None,
    profiles: dict[str, Profile] | None = None,
    ipsets: tuple[IPSet, ...] = (),
    services: tuple[Service, ...] = (),
    host: bool = False,
) -> SimState:
    """A node's desired state; effective policy is left for explain to resolve."""
    state = SimState()
    state.workload_endpoints = {ep.key: ep for ep in endpoints}
    state.policies = {
        key(n): Policy("t", inbound=r, outbound=r) for n, r in (inbound or {}).items()
    }
    state.profiles = {"open": OPEN, **(profiles or {})}
    state.ipsets = {s.id: s for s in ipsets}
    state.services = {s.key: s for s in services}
    if host:
        hep = HostEndpoint(HostEndpointKey("node-eth0"), "eth0", expected_ipv4_addrs=(HOST_IP,))
        state.host_endpoints = {hep.key: hep}
    return state


# --- JSON builders: whole values, spelled once ---------------------------------------------


def where(**kw: Any) -> dict[str, Any]:
    keys = ("direction", "endpoint", "tier", "policy", "rule", "profile", "backend")
    out: dict[str, Any] = dict.fromkeys(keys)
    out["direction"] = "none"
    out.update(kw)
    return out


def ep_at(k: WorkloadEndpointKey, direction: str) -> dict[str, Any]:
    return {"direction": direction, "endpoint": str(k)}


def step(kind: str, at: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"kind": kind, **at, **kw}


def entered(k: WorkloadEndpointKey, direction: str, **kw: Any) -> dict[str, Any]:
    iface = f"cali-{k.workload_id.split('/')[1]}"
    return step("direction", ep_at(k, direction), note=f"interface {iface}", **kw)


def location(address: str, kind: str = "outside", ep: WorkloadEndpointKey | None = None) -> Any:
    return {
        "address": address,
        "kind": kind,
        "endpoint": None if ep is None else str(ep),
        "interface": None if ep is None else f"cali-{ep.workload_id.split('/')[1]}",
        "host_endpoint": "node-eth0" if kind == "host" else None,
    }


def packet(src: str, dst: str, proto: str = "tcp", port: int | None = 80, **kw: Any) -> Any:
    return {
        "src": src,
        "dst": dst,
        "protocol": proto,
        "src_port": None,
        "dst_port": port,
        "icmp_type": None,
        "icmp_code": None,
        **kw,
    }


def answer(
    verdict: str,
    decided_by: dict[str, Any],
    steps: list[dict[str, Any]],
    *,
    pkt: Any,
    source: Any,
    destination: Any,
    service: Any = None,
) -> dict[str, Any]:
    return {
        "verdict": verdict,
        "decided_by": decided_by,
        "steps": steps,
        "packet": pkt,
        "source": source,
        "destination": destination,
        "service": service,
    }


B_IN = ep_at(B_KEY, "ingress")
A_OUT = ep_at(A_KEY, "egress")
P = "NetworkPolicy:ns/p"
TCP80 = Rule(ALLOW, protocol="tcp", dst_ports=(PortRange(80, 80),))


def from_outside_to_b(
    verdict: str, decided_by: dict[str, Any], steps: list[dict[str, Any]]
) -> dict[str, Any]:
    return answer(
        verdict,
        decided_by,
        [entered(B_KEY, "ingress"), *steps],
        pkt=packet(OUTSIDE_IP, "10.0.1.5"),
        source=location(OUTSIDE_IP),
        destination=location("10.0.1.5", "workload", B_KEY),
    )


# --- one direction: rules, tiers, profiles --------------------------------------------------


def test_allow_by_rule() -> None:
    state = node(b(tiers=(tier("t", "p"),)), inbound={"p": (Rule(DENY, protocol="udp"), TCP80)})
    got = explain(state, OUTSIDE_IP, "10.0.1.5", "tcp", 80)
    assert got.to_json() == from_outside_to_b(
        "allow",
        where(**B_IN, tier="t", policy=P, rule=1),
        [
            step("tier", B_IN, tier="t", note="default action deny"),
            step("policy", B_IN, tier="t", policy=P, note="2 rule(s)"),
            step(
                "rule",
                B_IN,
                tier="t",
                policy=P,
                rule=0,
                outcome="no-match",
                mismatch="protocol",
                note="deny protocol=udp",
            ),
            step(
                "rule",
                B_IN,
                tier="t",
                policy=P,
                rule=1,
                outcome="allow",
                note="allow protocol=tcp dst_ports=80",
            ),
        ],
    )


def test_deny_by_rule_after_a_log_rule() -> None:
    rules = (Rule(LOG), Rule(DENY, src_nets=("192.168.0.0/16",), rule_id="no-lab"), TCP80)
    state = node(b(tiers=(tier("t", "p"),)), inbound={"p": rules})
    got = explain(state, OUTSIDE_IP, "10.0.1.5", "tcp", 80)
    at = {**B_IN, "tier": "t", "policy": P}
    assert got.to_json() == from_outside_to_b(
        "deny",
        where(**at, rule=1),
        [
            step("tier", B_IN, tier="t", note="default action deny"),
            step("policy", at, note="3 rule(s)"),
            step("rule", at, rule=0, outcome="log", note="log"),
            step("rule", at, rule=1, outcome="deny", note="deny src_nets=192.168.0.0/16 [no-lab]"),
        ],
    )


def test_pass_goes_on_to_the_next_tier() -> None:
    state = node(
        b(tiers=(tier("t1", "pass", "deny"), tier("t2", "allow"))),
        inbound={"pass": (Rule(PASS),), "deny": (Rule(DENY),), "allow": (Rule(ALLOW),)},
    )
    got = explain(state, OUTSIDE_IP, "10.0.1.5", "tcp", 80)
    t1 = {**B_IN, "tier": "t1", "policy": "NetworkPolicy:ns/pass"}
    t2 = {**B_IN, "tier": "t2", "policy": "NetworkPolicy:ns/allow"}
    assert got.to_json() == from_outside_to_b(
        "allow",
        where(**t2, rule=0),
        [
            step("tier", B_IN, tier="t1", note="default action deny"),
            step("policy", t1, note="1 rule(s)"),
            step("rule", t1, rule=0, outcome="pass", note="pass"),
            step("tier", B_IN, tier="t2", note="default action deny"),
            step("policy", t2, note="1 rule(s)"),
            step("rule", t2, rule=0, outcome="allow", note="allow"),
        ],
    )
    assert got.to_text() == (
        "packet: 192.168.1.1 -> 10.0.1.5 tcp port 80\n"
        "source: 192.168.1.1, outside this node\n"
        "destination: 10.0.1.5, workload k8s/ns/b/eth0 (cali-b)\n"
        "ingress policy of workload k8s/ns/b/eth0 (interface cali-b)\n"
        "  tier t1 (default action deny)\n"
        "    policy NetworkPolicy:ns/pass (1 rule(s))\n"
        "      rule 0: pass -> matched: pass, to the next tier\n"
        "  tier t2 (default action deny)\n"
        "    policy NetworkPolicy:ns/allow (1 rule(s))\n"
        "      rule 0: allow -> matched: allow\n"
        "verdict: allow, decided by ingress of k8s/ns/b/eth0, tier t2,"
        " policy NetworkPolicy:ns/allow, rule 0\n"
    )


def test_end_of_tier_denies_what_no_policy_decided() -> None:
    state = node(
        b(tiers=(tier("t", "p"),), profiles=("open",)),
        inbound={"p": (Rule(ALLOW, protocol="udp"),)},
    )
    got = explain(state, OUTSIDE_IP, "10.0.1.5", "tcp", 80)
    at = {**B_IN, "tier": "t"}
    assert got.to_json() == from_outside_to_b(
        "deny",
        where(**at, rule="end-of-tier"),
        [
            step("tier", at, note="default action deny"),
            step("policy", at, policy=P, note="1 rule(s)"),
            step(
                "rule",
                at,
                policy=P,
                rule=0,
                outcome="no-match",
                mismatch="protocol",
                note="allow protocol=udp",
            ),
            step(
                "end-of-tier",
                at,
                rule="end-of-tier",
                outcome="deny",
                note="no policy in the tier decided",
            ),
        ],
    )


def test_profile_allows_when_there_are_no_tiers() -> None:
    got = explain(node(b(profiles=("open",))), OUTSIDE_IP, "10.0.1.5", "tcp", 80)
    assert got.to_json() == from_outside_to_b(
        "allow",
        where(**B_IN, rule="profile", profile={"name": "open", "rule": 0}),
        [
            step("profile", B_IN, profile={"name": "open"}),
            step(
                "rule",
                B_IN,
                rule="profile",
                profile={"name": "open", "rule": 0},
                outcome="allow",
                note="allow",
            ),
        ],
    )


def test_profiles_fall_through_to_the_default_deny() -> None:
    profiles = {
        "first": Profile((Rule(PASS), Rule(ALLOW))),
        "udp-only": Profile((Rule(ALLOW, protocol="udp"),)),
    }
    state = node(b(profiles=("first", "udp-only")), profiles=profiles)
    got = explain(state, OUTSIDE_IP, "10.0.1.5", "tcp", 80)
    assert got.to_json() == from_outside_to_b(
        "deny",
        where(**B_IN, rule="default"),
        [
            step("profile", B_IN, profile={"name": "first"}),
            step(
                "rule",
                B_IN,
                rule="profile",
                profile={"name": "first", "rule": 0},
                outcome="pass",
                note="pass",
            ),
            step("profile", B_IN, profile={"name": "udp-only"}),
            step(
                "rule",
                B_IN,
                rule="profile",
                profile={"name": "udp-only", "rule": 0},
                outcome="no-match",
                mismatch="protocol",
                note="allow protocol=udp",
            ),
            step(
                "default",
                B_IN,
                rule="default",
                outcome="deny",
                note="no policy or profile allowed it",
            ),
        ],
    )


def test_an_endpoint_that_is_not_active_drops_everything() -> None:
    got = explain(node(b(profiles=("open",), state="inactive")), OUTSIDE_IP, "10.0.1.5", "tcp", 80)
    assert got.to_json() == from_outside_to_b(
        "deny",
        where(**B_IN, rule="admin-down"),
        [step("admin-down", B_IN, rule="admin-down", outcome="deny", note="endpoint is inactive")],
    )


def test_a_spoofed_source_is_dropped_before_egress_policy() -> None:
    state = node(a(profiles=("open",)), b(profiles=("open",)))
    got = explain(state, "10.0.0.9", "10.0.1.5", "tcp", 80, sender="ns/a")
    assert got.to_json() == answer(
        "deny",
        where(**A_OUT, rule="spoofed-source"),
        [
            entered(A_KEY, "egress"),
            step(
                "spoofed-source",
                A_OUT,
                rule="spoofed-source",
                outcome="deny",
                note="source 10.0.0.9 is not one of the endpoint's addresses",
            ),
        ],
        pkt=packet("10.0.0.9", "10.0.1.5"),
        source=location("10.0.0.9", "workload", A_KEY),
        destination=location("10.0.1.5", "workload", B_KEY),
    )


def test_ip_sets_and_named_ports_between_two_workloads() -> None:
    sets = (
        IPSet("clients", IPSetType.IP, frozenset({"10.0.0.1"})),
        IPSet("http", IPSetType.IP_AND_PORT, frozenset({"10.0.1.5,tcp:8080"})),
    )
    rule = Rule(ALLOW, src_ip_set_ids=("clients",), dst_named_port_ip_set_ids=("http",))
    state = node(
        a(profiles=("open",)), b(tiers=(tier("t", "p"),)), inbound={"p": (rule,)}, ipsets=sets
    )
    at = {**B_IN, "tier": "t", "policy": P}
    rule_note = "allow dst_named_port_ip_set_ids=http src_ip_set_ids=clients"
    assert explain(state, "10.0.0.1", "10.0.1.5", "tcp", 8080).to_json() == answer(
        "allow",
        where(**at, rule=0),
        [
            entered(A_KEY, "egress"),
            step("profile", A_OUT, profile={"name": "open"}),
            step(
                "rule",
                A_OUT,
                rule="profile",
                profile={"name": "open", "rule": 0},
                outcome="allow",
                note="allow",
            ),
            entered(B_KEY, "ingress"),
            step("tier", B_IN, tier="t", note="default action deny"),
            step("policy", at, note="1 rule(s)"),
            step("rule", at, rule=0, outcome="allow", note=rule_note),
        ],
        pkt=packet("10.0.0.1", "10.0.1.5", port=8080),
        source=location("10.0.0.1", "workload", A_KEY),
        destination=location("10.0.1.5", "workload", B_KEY),
    )
    # The wrong port: not the named port, so the tier's end denies.
    assert explain(state, "10.0.0.1", "10.0.1.5", "tcp", 8081).to_json() == answer(
        "deny",
        where(**B_IN, tier="t", rule="end-of-tier"),
        [
            entered(A_KEY, "egress"),
            step("profile", A_OUT, profile={"name": "open"}),
            step(
                "rule",
                A_OUT,
                rule="profile",
                profile={"name": "open", "rule": 0},
                outcome="allow",
                note="allow",
            ),
            entered(B_KEY, "ingress"),
            step("tier", B_IN, tier="t", note="default action deny"),
            step("policy", at, note="1 rule(s)"),
            step("rule", at, rule=0, outcome="no-match", mismatch="dst_ports", note=rule_note),
            step(
                "end-of-tier",
                B_IN,
                tier="t",
                rule="end-of-tier",
                outcome="deny",
                note="no policy in the tier decided",
            ),
        ],
        pkt=packet("10.0.0.1", "10.0.1.5", port=8081),
        source=location("10.0.0.1", "workload", A_KEY),
        destination=location("10.0.1.5", "workload", B_KEY),
    )


def test_ipv6_ping_is_icmpv6_echo() -> None:
    rule = Rule(ALLOW, protocol="icmpv6", icmp=IcmpMatch(128), src_nets=("fd00::/64",))
    state = node(b(tiers=(tier("t", "p"),)), inbound={"p": (rule,)})
    got = explain(state, "fd00::1:7", "fd00:0:0:0:0:0:1:5", "icmp")
    at = {**B_IN, "tier": "t", "policy": P}
    assert got.to_json() == answer(
        "allow",
        where(**at, rule=0),
        [
            entered(B_KEY, "ingress"),
            step("tier", B_IN, tier="t", note="default action deny"),
            step("policy", at, note="1 rule(s)"),
            step(
                "rule",
                at,
                rule=0,
                outcome="allow",
                note="allow protocol=icmpv6 src_nets=fd00::/64 icmp=128",
            ),
        ],
        pkt=packet("fd00::1:7", "fd00::1:5", "icmpv6", None, icmp_type=128, icmp_code=0),
        source=location("fd00::1:7"),
        destination=location("fd00::1:5", "workload", B_KEY),
    )


# --- no workload, the host ------------------------------------------------------------------


def test_no_local_endpoint_between_two_outside_addresses() -> None:
    got = explain(node(b(profiles=("open",))), OUTSIDE_IP, "192.168.1.2", "udp", 53)
    assert got.to_json() == answer(
        "allow",
        where(rule="default"),
        [
            step(
                "no-policy",
                {},
                rule="default",
                outcome="allow",
                note="no local endpoint's policy applies",
            )
        ],
        pkt=packet(OUTSIDE_IP, "192.168.1.2", "udp", 53),
        source=location(OUTSIDE_IP),
        destination=location("192.168.1.2"),
    )


def test_a_workload_talking_to_itself_never_meets_the_node() -> None:
    got = explain(node(b(state="inactive")), "10.0.1.5", "10.0.1.5", "tcp", 80)
    note = "traffic within one workload never leaves it: no local endpoint's policy applies"
    assert got.to_json() == answer(
        "allow",
        where(rule="default"),
        [step("no-policy", {}, rule="default", outcome="allow", note=note)],
        pkt=packet("10.0.1.5", "10.0.1.5"),
        source=location("10.0.1.5", "workload", B_KEY),
        destination=location("10.0.1.5", "workload", B_KEY),
    )


HEP_NOTE = step("not-evaluated", {}, note="host endpoint policy is not evaluated (node-eth0)")


def test_the_host_reaches_its_workloads_unpoliced() -> None:
    state = node(b(state="inactive"), host=True)  # not even admin state stops it
    got = explain(state, HOST_IP, "10.0.1.5", "tcp", 80)
    at = {**B_IN, "rule": "not-policed"}
    assert got.to_json() == answer(
        "allow",
        where(**at),
        [
            HEP_NOTE,
            step(
                "not-policed",
                at,
                outcome="allow",
                note="traffic from the host to its own workloads is not policed",
            ),
        ],
        pkt=packet(HOST_IP, "10.0.1.5"),
        source=location(HOST_IP, "host"),
        destination=location("10.0.1.5", "workload", B_KEY),
    )


def test_workload_to_host_meets_default_endpoint_to_host_action_when_given() -> None:
    state = node(a(profiles=("open",)), host=True)
    to_host = {**A_OUT, "rule": "endpoint-to-host"}
    egress = [
        HEP_NOTE,
        entered(A_KEY, "egress"),
        step("profile", A_OUT, profile={"name": "open"}),
        step(
            "rule",
            A_OUT,
            rule="profile",
            profile={"name": "open", "rule": 0},
            outcome="allow",
            note="allow",
        ),
    ]
    common: dict[str, Any] = {
        "pkt": packet("10.0.0.1", HOST_IP, port=10250),
        "source": location("10.0.0.1", "workload", A_KEY),
        "destination": location(HOST_IP, "host"),
    }
    dropped = explain(state, "10.0.0.1", HOST_IP, "tcp", 10250, endpoint_to_host_action="DROP")
    assert dropped.to_json() == answer(
        "deny",
        where(**to_host),
        [
            *egress,
            step(
                "endpoint-to-host", to_host, outcome="deny", note="DefaultEndpointToHostAction DROP"
            ),
        ],
        **common,
    )
    unknown = explain(state, "10.0.0.1", HOST_IP, "tcp", 10250)
    assert unknown.to_json() == answer(
        "allow",
        where(**A_OUT, rule="profile", profile={"name": "open", "rule": 0}),
        [
            *egress,
            step(
                "not-evaluated",
                to_host,
                note="DefaultEndpointToHostAction then applies: configuration, not evaluated",
            ),
        ],
        **common,
    )


# --- services -------------------------------------------------------------------------------

HTTP = ServicePort("http", "tcp", 80, node_port=30080)


def web_service(*backends: str, **kw: Any) -> Service:
    return Service(
        ServiceKey("ns", "web"),
        cluster_ips=("10.96.0.1",),
        ports=(HTTP,),
        backends=tuple(Backend(ip, (BackendPort("http", "tcp", 8080),)) for ip in backends),
        **kw,
    )


def test_a_service_is_denied_when_any_backend_is_and_names_the_first_denied() -> None:
    state = node(
        b(profiles=("open",)),
        c(tiers=(tier("t", "p"),)),
        inbound={"p": (Rule(DENY, protocol="tcp"),)},
        services=(web_service("10.0.1.5", "10.0.1.6"),),
    )
    got = explain(state, OUTSIDE_IP, "10.96.0.1", "tcp", 80)
    to_b, to_c = {"backend": "10.0.1.5:8080"}, {"backend": "10.0.1.6:8080"}
    b_in, c_in = {**B_IN, **to_b}, {**ep_at(C_KEY, "ingress"), **to_c}
    assert got.to_json() == answer(
        "deny",
        where(**c_in, tier="t", policy=P, rule=0),
        [
            step(
                "service",
                {"direction": "service"},
                note="cluster-ip 10.96.0.1:80/tcp is service ns/web port http: 2 backend(s):"
                " 10.0.1.5:8080, 10.0.1.6:8080",
            ),
            step(
                "backend",
                {"direction": "service", **to_b},
                note="DNAT to 10.0.1.5, workload k8s/ns/b/eth0 (cali-b)",
            ),
            entered(B_KEY, "ingress", **to_b),
            step("profile", b_in, profile={"name": "open"}),
            step(
                "rule",
                b_in,
                rule="profile",
                profile={"name": "open", "rule": 0},
                outcome="allow",
                note="allow",
            ),
            step(
                "backend",
                {"direction": "service", **to_c},
                note="DNAT to 10.0.1.6, workload k8s/ns/c/eth0 (cali-c)",
            ),
            entered(C_KEY, "ingress", **to_c),
            step("tier", c_in, tier="t", note="default action deny"),
            step("policy", c_in, tier="t", policy=P, note="1 rule(s)"),
            step(
                "rule", c_in, tier="t", policy=P, rule=0, outcome="deny", note="deny protocol=tcp"
            ),
        ],
        pkt=packet(OUTSIDE_IP, "10.96.0.1"),
        source=location(OUTSIDE_IP),
        destination=location("10.96.0.1"),
        service={
            "service": "ns/web",
            "port_name": "http",
            "frontend": "cluster-ip",
            "address": "10.96.0.1",
            "port": 80,
            "protocol": "tcp",
            "backends": ["10.0.1.5:8080", "10.0.1.6:8080"],
        },
    )


def test_a_service_without_backends_is_refused() -> None:
    got = explain(node(services=(web_service(),)), OUTSIDE_IP, "10.96.0.1", "tcp", 80)
    assert got.to_json() == answer(
        "deny",
        where(direction="service", rule="no-backends"),
        [
            step(
                "service",
                {"direction": "service"},
                note="cluster-ip 10.96.0.1:80/tcp is service ns/web port http: 0 backend(s)",
            ),
            step(
                "no-backends",
                {"direction": "service"},
                rule="no-backends",
                outcome="deny",
                note="no backend to send it to: refused (kube-proxy's reject)",
            ),
        ],
        pkt=packet(OUTSIDE_IP, "10.96.0.1"),
        source=location(OUTSIDE_IP),
        destination=location("10.96.0.1"),
        service={
            "service": "ns/web",
            "port_name": "http",
            "frontend": "cluster-ip",
            "address": "10.96.0.1",
            "port": 80,
            "protocol": "tcp",
            "backends": [],
        },
    )


def test_a_node_port_of_a_local_policy_service_from_outside_needs_a_local_backend() -> None:
    state = node(services=(web_service("10.9.9.9", external_local=True),), host=True)
    got = explain(state, OUTSIDE_IP, HOST_IP, "tcp", 30080)
    service_at = {"direction": "service"}
    assert got.to_json() == answer(
        "deny",
        where(direction="service", rule="no-local-backends"),
        [
            step(
                "service",
                service_at,
                note="node-port 192.168.56.11:30080/tcp is service ns/web port http: 0 backend(s)",
            ),
            step(
                "no-local-backends",
                service_at,
                rule="no-local-backends",
                outcome="deny",
                note="externalTrafficPolicy Local and no backend on this node: dropped",
            ),
        ],
        pkt=packet(OUTSIDE_IP, HOST_IP, port=30080),
        source=location(OUTSIDE_IP),
        destination=location(HOST_IP, "host"),
        service={
            "service": "ns/web",
            "port_name": "http",
            "frontend": "node-port",
            "address": HOST_IP,
            "port": 30080,
            "protocol": "tcp",
            "backends": [],
        },
    )


def test_a_load_balancer_ip_refuses_sources_outside_its_ranges() -> None:
    service = web_service(
        "10.0.1.5", load_balancer_ips=("203.0.113.7",), source_ranges=("198.51.100.0/24",)
    )
    got = explain(
        node(b(profiles=("open",)), services=(service,)), OUTSIDE_IP, "203.0.113.7", "tcp", 80
    )
    service_at = {"direction": "service"}
    assert got.to_json() == answer(
        "deny",
        where(direction="service", rule="source-range"),
        [
            step(
                "service",
                service_at,
                note="load-balancer-ip 203.0.113.7:80/tcp is service ns/web port http:"
                " 0 backend(s)",
            ),
            step(
                "source-range",
                service_at,
                rule="source-range",
                outcome="deny",
                note="source not in loadBalancerSourceRanges: dropped",
            ),
        ],
        pkt=packet(OUTSIDE_IP, "203.0.113.7"),
        source=location(OUTSIDE_IP),
        destination=location("203.0.113.7"),
        service={
            "service": "ns/web",
            "port_name": "http",
            "frontend": "load-balancer-ip",
            "address": "203.0.113.7",
            "port": 80,
            "protocol": "tcp",
            "backends": [],
        },
    )


def test_what_does_not_make_a_packet_is_refused() -> None:
    state = node()
    for args in (
        ("10.0.0.1", "fd00::1", "tcp", 80),  # two families
        ("10.0.0.1", "10.0.0.2", "tcp", None),  # tcp needs a port
        ("10.0.0.1", "10.0.0.2", "icmp", 80),  # icmp has none
        ("10.0.0.1", "10.0.0.2", "gre", None),  # not a protocol Felix names
        ("10.0.0.300", "10.0.0.2", "udp", 53),
    ):
        with pytest.raises(ValueError):
            explain(state, *args)


# --- the reference API is the product's ---------------------------------------------------


def test_the_tests_reference_is_the_products_evaluator() -> None:
    for name in reference_eval.__all__:
        assert getattr(reference_eval, name) is getattr(evaluate, name)


def test_decisions_carry_where_they_were_made() -> None:
    state = reference_eval.PolicyState(
        {key("p"): Policy("t", inbound=(Rule(ALLOW, protocol="udp"),))}, {"open": OPEN}
    )
    pkt = reference_eval.Packet(OUTSIDE_IP, "10.0.1.5", "tcp", 1, 80)
    made = reference_eval.endpoint_decision(b(tiers=(tier("t", "p"),)), "ingress", pkt, state)
    assert (made.allowed, made.direction, made.tier, made.policy, made.rule) == (
        False,
        "ingress",
        "t",
        None,
        "end-of-tier",
    )
    assert made.reason == "ingress cali-b: end of tier t"
    opened = reference_eval.endpoint_decision(b(profiles=("open",)), "ingress", pkt, state)
    assert opened.rule == "profile" and opened.by.profile == evaluate.ProfileRef("open", 0)


# --- property: the deciding step is real ----------------------------------------------------

# Unconstrained fields are likelier, so that rules match often enough to decide.
ACTIONS = st.sampled_from([ALLOW, ALLOW, DENY, PASS, LOG])
rules = st.builds(
    Rule,
    ACTIONS,
    protocol=st.sampled_from([None, None, "tcp", "udp"]),
    dst_ports=st.sampled_from([(), (), (PortRange(80, 80),), (PortRange(443, 8080),)]),
    src_nets=st.sampled_from([(), (), ("10.0.0.0/24",), ("192.168.0.0/16", "fd00::/64")]),
    src_ip_set_ids=st.sampled_from([(), (), ("clients",), ("missing",)]),
)
rule_lists = st.lists(rules, min_size=1, max_size=3).map(tuple)
POLICY_NAMES = ("p0", "p1", "p2", "p3")
SETS = (IPSet("clients", IPSetType.IP, frozenset({"10.0.0.1", "fd00::1"})),)


@st.composite
def states(draw: st.DrawFn) -> SimState:
    """Two workloads (a sends, b receives) with drawn tiers, policies and profiles."""
    state = SimState()
    state.ipsets = {s.id: s for s in SETS}
    for name in POLICY_NAMES:
        state.policies[key(name)] = Policy("t", draw(rule_lists), draw(rule_lists))
    for name in ("pr0", "pr1"):
        state.profiles[name] = Profile(draw(rule_lists), draw(rule_lists))
    for make in (a, b):
        tiers = []
        for index in range(draw(st.integers(0, 2))):
            names = draw(
                st.lists(st.sampled_from(POLICY_NAMES), min_size=1, max_size=2, unique=True)
            )
            default = draw(st.sampled_from([DENY, PASS]))
            tiers.append(tier(f"t{index}", *names, default=default))
        profiles = tuple(
            draw(st.lists(st.sampled_from(["pr0", "pr1"]), min_size=1, max_size=2, unique=True))
        )
        ep = make(tiers=tuple(tiers), profiles=profiles)
        state.workload_endpoints[ep.key] = ep
    return state


flows = st.tuples(
    st.sampled_from([("10.0.0.1", "10.0.1.5"), ("fd00::1", "fd00::1:5"), (OUTSIDE_IP, "10.0.1.5")]),
    st.sampled_from([("tcp", 80), ("tcp", 443), ("udp", 80), ("icmp", None)]),
)


def deciding_index(got: Explanation) -> int:
    """Where in the steps the decision was made (the step there carries the verdict)."""
    found = [
        i for i, s in enumerate(got.steps) if s.at == got.decided_by and s.outcome == got.verdict
    ]
    assert found, got.to_text()
    return found[0]


def path(got: Explanation) -> list[tuple[object, ...]]:
    return [(s.kind, s.at, s.outcome) for s in got.steps]


def without_decider(state: SimState, got: Explanation, *, delete: bool) -> SimState | None:
    """``state`` with the deciding rule taken away: deleted, or made a log rule (which
    never decides, and keeps the other rules' indices); a tier's end made Pass."""
    by = got.decided_by
    inbound = by.direction == "ingress"
    out = state.copy()

    def edit(rules: tuple[Rule, ...], index: int) -> tuple[Rule, ...]:
        kept = () if delete else (dataclasses.replace(rules[index], action=LOG),)
        return rules[:index] + kept + rules[index + 1 :]

    if isinstance(by.rule, int) and by.policy is not None:
        k = next(k for k in state.policies if str(k) == by.policy)
        pol = state.policies[k]
        out.policies[k] = (
            dataclasses.replace(pol, inbound=edit(pol.inbound, by.rule))
            if inbound
            else dataclasses.replace(pol, outbound=edit(pol.outbound, by.rule))
        )
    elif by.rule == "profile" and by.profile is not None and by.profile.rule is not None:
        prof = state.profiles[by.profile.name]
        out.profiles[by.profile.name] = (
            dataclasses.replace(prof, inbound=edit(prof.inbound, by.profile.rule))
            if inbound
            else dataclasses.replace(prof, outbound=edit(prof.outbound, by.profile.rule))
        )
    elif by.rule == "end-of-tier":
        ep = next(e for e in state.workload_endpoints.values() if str(e.key) == by.endpoint)
        tiers = tuple(
            dataclasses.replace(t, default_action=PASS) if t.name == by.tier else t
            for t in ep.tiers
        )
        out.workload_endpoints[ep.key] = dataclasses.replace(ep, tiers=tiers)
    else:
        return None  # the default deny, or no local policy at all: nothing to take away
    return out


@settings(max_examples=300, deadline=None)
@given(state=states(), flow=flows)
def test_the_deciding_step_is_in_the_steps_and_taking_it_away_moves_the_decision_later(
    state: SimState, flow: tuple[tuple[str, str], tuple[str, int | None]]
) -> None:
    (src, dst), (proto, port) = flow
    got = explain(state, src, dst, proto, port)
    at = deciding_index(got)
    # The answer agrees with the reference API the kernel tests use.
    pkt = got.packet
    eps = {e.key: e for e in state.workload_endpoints.values()}
    ref_state = reference_eval.PolicyState(state.policies, state.profiles, state.ipsets)
    if got.source.kind == "workload":
        expected = reference_eval.forward_decision(eps[A_KEY], eps[B_KEY], pkt, ref_state)
    else:
        expected = reference_eval.endpoint_decision(eps[B_KEY], "ingress", pkt, ref_state)
    assert (got.verdict == "allow") == expected.allowed and got.decided_by == expected.by

    logged = without_decider(state, got, delete=False)
    if logged is None:
        assert got.decided_by.rule == "default"
        return
    again = explain(logged, src, dst, proto, port)
    # Everything before the decision is as it was (but the tier's note of its
    # default action); the step that decided now goes on (a log rule, a
    # passing tier end); the decision comes later.
    assert path(again)[:at] == path(got)[:at]
    assert again.steps[at].at == got.steps[at].at
    assert again.steps[at].outcome in ("log", "pass")
    assert deciding_index(again) > at
    # Deleting the rule outright decides the same as logging it.
    deleted = without_decider(state, got, delete=True)
    assert deleted is not None
    assert explain(deleted, src, dst, proto, port).verdict == again.verdict


# --- the demo node: explain gives the demo's whole expected matrix ---------------------------


@pytest.fixture(scope="module")
def demo_state() -> SimState:
    platform = SimPlatform()
    dp = Dataplane(platform)
    with LOG_PATH.open("rb") as log:
        trio.run(dp.run, FileSource(log))
    assert dp.in_sync and dp.stats.rejected == 0
    return platform.programmed


def column_addresses(col: demo.Column) -> dict[demo.Family, str]:
    """examples/demo.py's addresses(), without namespaces: pods, and the uplink host's."""
    pods = {p.name: p for p in demo.ALL_PODS}
    if col.dest in pods:
        return {4: pods[col.dest].ipv4, 6: pods[col.dest].ipv6}
    if col.dest == "dns":
        return {4: demo.KUBE_DNS}
    if col.dest == "block":
        return dict(demo.BLOCKED)
    return {family: NODE_UPLINK[family][1] for family in demo.FAMILIES}


def test_explain_gives_the_demos_expected_matrix(demo_state: SimState) -> None:
    cells, wrong = 0, []
    for col in demo.COLUMNS:
        for family, address in column_addresses(col).items():
            for pod in demo.ALL_PODS:
                if pod.name == col.dest:
                    continue
                src = pod.ipv4 if family == 4 else pod.ipv6
                assert ipaddress.ip_address(src).version == family
                expected = demo.expected(pod.name, col, family, address)
                got = explain(demo_state, src, address, col.proto, col.port or None)
                cells += 1
                if (got.verdict == "allow") != expected:
                    wrong.append(f"{pod.name} -> {col.dest} {col.proto}/{col.port} v{family}")
    assert wrong == []
    assert cells == 121  # the demo's "matrix: 121/121 cells as expected"


def test_the_demos_deny_names_the_tier_and_rule(demo_state: SimState) -> None:
    web_1 = next(p for p in demo.ALL_PODS if p.name == "web-1")
    db_1 = next(p for p in demo.ALL_PODS if p.name == "db-1")
    got = explain(demo_state, web_1.ipv6, db_1.ipv6, "tcp", 5432)
    assert got.decided_by == evaluate.Where(
        "egress", "k8s/frontend/web-1/eth0", "default", None, "end-of-tier"
    )
    assert got.to_text().splitlines()[-1] == (
        "verdict: deny, decided by egress of k8s/frontend/web-1/eth0, tier default, end-of-tier"
    )
