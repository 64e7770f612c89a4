"""Rendered ACLs decide every packet as Calico does, or fail closed and say so.

Generated tiers, policies and profiles (every match field, pass, log, deny,
negations, named ports, sets, both families) are rendered for one endpoint;
then every packet of a small universe gets the HNS evaluator's verdict on
the rendered ACLs and the reference evaluator's verdict on the policy. They
must agree exactly when the renderer reported nothing inexact, and HNS may
never allow what the reference drops when it did.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TypeVar

from hypothesis import event, given, settings
from hypothesis import strategies as st

from dataplane.model import (
    Action,
    DirectionPolicy,
    IcmpMatch,
    IPSet,
    IPSetType,
    Policy,
    PolicyKey,
    PortRange,
    Profile,
    Rule,
    TierInfo,
    TierPolicies,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)
from dataplane.windows.hns import acl
from dataplane.windows.policy.acl_render import RenderContext, render_direction
from tests import reference_eval as ref

POD4, POD6 = "10.0.0.5", "fd00::5"
PEERS = ("10.0.0.1", "10.0.1.7", "192.168.3.4", "fd00::1", "fd00:1::7")
NETS = ("10.0.0.0/24", "10.0.0.0/16", "192.168.0.0/16", "fd00::/64", "10.0.0.1/32", "0.0.0.0/0")
SETS = {
    "a": IPSet("a", IPSetType.IP, frozenset({"10.0.0.1", "192.168.3.4", "fd00::1"})),
    "b": IPSet("b", IPSetType.NET, frozenset({"10.0.0.0/24", "fd00::/120"})),
    "np": IPSet(
        "np",
        IPSetType.IP_AND_PORT,
        frozenset({"10.0.0.5,tcp:8080", "fd00::5,tcp:8080", "10.0.0.1,udp:53", "10.0.0.5,udp:53"}),
    ),
}
ADDRESS_SETS = ("a", "b", "missing")
PORTS = (PortRange(80, 80), PortRange(1000, 2000), PortRange(53, 53), PortRange(8080, 8080))
PROTOCOLS = ("tcp", "udp", "icmp", "icmpv6", "132")

few = st.lists
T = TypeVar("T")


def rarely(values: st.SearchStrategy[tuple[T, ...]]) -> st.SearchStrategy[tuple[T, ...]]:
    """Mostly empty: a rule that sets every field matches almost nothing."""
    return st.one_of(st.just(()), st.just(()), st.just(()), values)


nets = rarely(few(st.sampled_from(NETS), min_size=1, max_size=2, unique=True).map(tuple))
address_sets = rarely(
    few(st.sampled_from(ADDRESS_SETS), min_size=1, max_size=2, unique=True).map(tuple)
)
ports = rarely(few(st.sampled_from(PORTS), min_size=1, max_size=2, unique=True).map(tuple))
named = rarely(st.just(("np",)))


def rule_strategy(inexpressible: bool) -> st.SearchStrategy[Rule]:
    """Rules over every match field; with ``inexpressible``, also what HNS cannot say."""
    actions = [Action.ALLOW] * 4 + [Action.DENY] * 3 + [Action.PASS] * 2
    return st.builds(
        Rule,
        action=st.sampled_from(actions + [Action.LOG] * inexpressible),
        ip_version=st.sampled_from([None, None, 4, 6]),
        protocol=st.sampled_from([None, None, *PROTOCOLS]),
        not_protocol=st.sampled_from([None, None, None, "tcp"]),
        src_nets=nets,
        not_src_nets=nets,
        dst_nets=nets,
        not_dst_nets=nets,
        src_ports=ports,
        not_src_ports=ports,
        dst_ports=ports,
        not_dst_ports=ports,
        dst_named_port_ip_set_ids=named,
        not_dst_named_port_ip_set_ids=named if inexpressible else st.just(()),
        src_ip_set_ids=address_sets,
        not_src_ip_set_ids=address_sets,
        dst_ip_set_ids=address_sets,
        not_dst_ip_set_ids=address_sets,
        icmp=st.sampled_from([None] * 3 + [IcmpMatch(8), IcmpMatch(0, 0)] * inexpressible),
    )


def tier_lists(
    inexpressible: bool,
) -> st.SearchStrategy[list[tuple[list[tuple[Rule, ...]], Action]]]:
    rule_lists = few(rule_strategy(inexpressible), max_size=3).map(tuple)
    tier = st.tuples(few(rule_lists, min_size=1, max_size=2), st.sampled_from(list(TIER_ENDS)))
    return few(tier, max_size=2)


def profile_lists(inexpressible: bool) -> st.SearchStrategy[list[tuple[Rule, ...]]]:
    return few(few(rule_strategy(inexpressible), max_size=3).map(tuple), max_size=2)


TIER_ENDS = (Action.DENY, Action.PASS)


def packets(inbound: bool) -> list[tuple[ref.Packet, acl.Packet]]:
    """Every packet of the universe that crosses the endpoint in this direction."""
    out = []
    for peer in PEERS:
        pod = POD4 if ":" not in peer else POD6
        src, dst = (peer, pod) if inbound else (pod, peer)
        for proto, number in (("tcp", 6), ("udp", 17), ("132", 132)):
            for dst_port in (80, 53, 1500, 8080, 22):
                out.append(
                    (
                        ref.Packet(src, dst, proto, 40000, dst_port),
                        acl.Packet(src, dst, number, 40000, dst_port),
                    )
                )
        icmp, number = ("icmp", 1) if ":" not in peer else ("icmpv6", 58)
        for icmp_type in (0, 8):
            out.append(
                (
                    ref.Packet(src, dst, icmp, icmp_type=icmp_type, icmp_code=0),
                    acl.Packet(src, dst, number),
                )
            )
    return out


PACKETS = {inbound: packets(inbound) for inbound in (True, False)}


def token_of(set_id: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, set_id)).upper()


def network_sets() -> dict[str, tuple[acl.IpNet, ...]]:
    policies = [
        {
            "Type": "SetPolicy",
            "Settings": {
                "Id": token_of(s.id),
                "Name": s.id,
                "PolicyType": "IPSET",
                "Values": ",".join(sorted(s.members)),
            },
        }
        for s in SETS.values()
        if s.type is not IPSetType.IP_AND_PORT
    ]
    return acl.set_members({"Policies": policies})


def check(
    tiers: list[tuple[list[tuple[Rule, ...]], Action]],
    profiles: list[tuple[Rule, ...]],
    inbound: bool,
    token: Callable[[str], str | None],
    *,
    exact: bool,
) -> None:
    policies: dict[PolicyKey, Policy] = {}
    tier_infos, tier_policies = [], []
    for t, (rule_sets, default) in enumerate(tiers):
        keys = []
        for p, tier_rules in enumerate(rule_sets):
            key = PolicyKey(f"t{t}p{p}")
            policies[key] = Policy(f"t{t}", inbound=tier_rules, outbound=tier_rules)
            keys.append(key)
        tier_infos.append(TierInfo(f"t{t}", tuple(keys), tuple(keys), default))
        tier_policies.append(TierPolicies(f"t{t}", tuple(keys), default))
    profile_map = {f"prof{i}": Profile(r, r) for i, r in enumerate(profiles)}
    context = RenderContext(policies, profile_map, SETS, (4, 6), token)
    direction = DirectionPolicy(tuple(tier_policies), tuple(profile_map))
    rendered = render_direction(direction, inbound, context)
    endpoint_json = {"Policies": [a.policy() for a in rendered.acls]}
    for a in rendered.acls:
        acl.parse_acl(a.policy()["Settings"])  # HNS would take every one
    endpoint = WorkloadEndpoint(
        WorkloadEndpointKey("k8s", "w", "e"),
        "eth0",
        profile_ids=tuple(profile_map),
        ipv4_nets=(f"{POD4}/32",),
        ipv6_nets=(f"{POD6}/128",),
        tiers=tuple(tier_infos),
    )
    state = ref.PolicyState(policies, profile_map, SETS)
    sets = network_sets()
    event("fails closed" if rendered.fail_closed else "exact")
    for note in rendered.fail_closed:
        event(f"inexact: {', '.join(note.what)}")
    event(f"{len(rendered.acls) // 10 * 10}+ ACLs")
    verdicts = set()
    for ref_packet, hns_packet in PACKETS[inbound]:
        expected = ref.endpoint_decision(
            endpoint, "ingress" if inbound else "egress", ref_packet, state
        )
        got = acl.endpoint_verdict(endpoint_json, "In" if inbound else "Out", hns_packet, sets)
        if exact:
            assert not rendered.fail_closed
        if rendered.fail_closed:
            assert expected.allowed or not got.allowed, (ref_packet, expected, got.rule)
        else:
            assert got.allowed == expected.allowed, (ref_packet, expected, got.rule)
        verdicts.add(got.allowed)
    event("some packets allowed, some dropped" if len(verdicts) == 2 else "one verdict for all")


Tiers = list[tuple[list[tuple[Rule, ...]], Action]]
Profiles = list[tuple[Rule, ...]]


def expanded(set_id: str) -> None:
    return None


def as_objects(set_id: str) -> str | None:
    return token_of(set_id) if set_id in ("a", "b") else None


@settings(max_examples=300, deadline=None)
@given(
    tier_lists(False), profile_lists(False), st.booleans(), st.sampled_from([expanded, as_objects])
)
def test_what_hns_can_say_decides_exactly_as_calico(
    tiers: Tiers, profiles: Profiles, inbound: bool, token: Callable[[str], str | None]
) -> None:
    check(tiers, profiles, inbound, token, exact=True)


@settings(max_examples=200, deadline=None)
@given(
    tier_lists(True), profile_lists(True), st.booleans(), st.sampled_from([expanded, as_objects])
)
def test_what_hns_cannot_say_fails_closed(
    tiers: Tiers, profiles: Profiles, inbound: bool, token: Callable[[str], str | None]
) -> None:
    check(tiers, profiles, inbound, token, exact=False)
