"""Generated policy for the differential tests: model values and their messages.

A :class:`Round` is one complete desired policy state for two pods (``a``
and ``b``): IP sets, policies, profiles, and each pod's tiers and profile
list. It is drawn as model values (what the reference evaluator reads) and
encoded to Felix's messages here, independently of the driver's own
conversion, so a conversion bug shows up as a disagreement too.

Values are drawn near the probes' boundaries, or the packets would tell us
little: CIDRs are blocks around the pods' addresses (the pods sit on either
side of a /24 and a /120 edge, so a block holds one, both or neither), port
ranges lie in small windows the pods listen on (every range edge is probed
just inside and just outside), and IP sets hold the pods' addresses and
named ports in those windows.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from hypothesis import strategies as st

from dataplane.model import (
    Action,
    IcmpMatch,
    IPSetType,
    Policy,
    PolicyKey,
    PortRange,
    Profile,
    Rule,
    TierInfo,
)
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.reference_eval import PROTOCOL_NUMBERS

__all__ = [
    "ADDRESSES",
    "DST_WINDOW",
    "IPSET_TYPES",
    "SRC_WINDOW",
    "EndpointPolicy",
    "Round",
    "endpoint_tiers_pb",
    "ipset_pb",
    "policy_key_pb",
    "policy_pb",
    "profile_pb",
    "rounds",
]

# The pods' addresses: b ends a /24 (/120) and a starts the next, so CIDR
# edges fall right between them. c is elsewhere in the pool.
ADDRESSES = {
    "a": ("10.65.1.0", "fd00:10:65::100"),
    "b": ("10.65.0.255", "fd00:10:65::ff"),
    "c": ("10.65.0.7", "fd00:10:65::7"),
}
EXTERNAL = ("192.168.200.2", "fd00:200::2")
# Servers listen on every DST_WINDOW port; clients bind SRC_WINDOW ports.
# Both lie below the kernel's ephemeral range (32768+), so a probe from an
# ephemeral port is outside every generated source range.
DST_WINDOW = (7000, 7011)
SRC_WINDOW = (7100, 7111)

IPSET_TYPES = {
    "ips-1": IPSetType.IP,
    "ips-2": IPSetType.IP,
    "nets-1": IPSetType.NET,
    "np-dst": IPSetType.IP_AND_PORT,
    "np-src": IPSetType.IP_AND_PORT,
}
MISSING_SET = "never-sent"  # referenced by rules, never created: an empty set
POLICY_KEYS = (
    PolicyKey("p0", "diff", "NetworkPolicy"),
    PolicyKey("p1", "diff", "NetworkPolicy"),
    PolicyKey("g0"),
)
PROFILE_NAMES = ("kns.diff", "ksa.diff.default")
TIER_NAMES = ("security", "platform", "default")


@dataclass(frozen=True)
class EndpointPolicy:
    tiers: tuple[TierInfo, ...] = ()
    profile_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Round:
    """One desired state, plus how to spell it and which ports to probe."""

    ipsets: Mapping[str, frozenset[str]]
    policies: Mapping[PolicyKey, Policy]
    profiles: Mapping[str, Profile]
    endpoints: Mapping[str, EndpointPolicy]  # pod name -> its policy
    dst_ports: tuple[int, ...]
    src_ports: tuple[int, ...]
    numbers: bool = False  # protocols as numbers, not names
    pass_word: str = "pass"  # or Felix's older "next-tier"


# --- strategies ------------------------------------------------------------------

_V4_PREFIXES = (0, 4, 8, 16, 23, 24, 25, 31, 32)
_V6_PREFIXES = (0, 48, 64, 119, 120, 121, 127, 128)


@st.composite
def cidrs(draw: st.DrawFn) -> str:
    """A block holding a pod (or the external host), at a prefix near the edges."""
    family = draw(st.sampled_from((0, 1)))
    anchors = [addrs[family] for addrs in ADDRESSES.values()] + [EXTERNAL[family]]
    anchor = draw(st.sampled_from(anchors))
    prefix = draw(st.sampled_from(_V6_PREFIXES if family else _V4_PREFIXES))
    return str(ipaddress.ip_network(f"{anchor}/{prefix}", strict=False))


def _ranges(window: tuple[int, int]) -> st.SearchStrategy[tuple[PortRange, ...]]:
    # Inside the window's interior, so one below and one above are probed too.
    low, high = window[0] + 1, window[1] - 1
    one = st.tuples(st.integers(low, high), st.integers(0, 4)).map(
        lambda t: PortRange(t[0], min(t[0] + t[1], high))
    )
    return st.lists(one, min_size=1, max_size=3).map(tuple)


def _sometimes(strategy: st.SearchStrategy[object], percent: int) -> st.SearchStrategy[object]:
    """``strategy``'s value ``percent`` % of the time, else None."""
    return st.integers(0, 99).flatmap(lambda n: strategy if n < percent else st.none())


_ADDRESS_SETS = ("ips-1", "ips-2", "nets-1", MISSING_SET)


def _set_ids(choices: tuple[str, ...]) -> st.SearchStrategy[tuple[str, ...]]:
    return st.lists(st.sampled_from(choices), min_size=1, max_size=2, unique=True).map(tuple)


@st.composite
def rules(draw: st.DrawFn) -> Rule:
    action = draw(
        st.sampled_from(
            (Action.ALLOW,) * 5 + (Action.DENY,) * 2 + (Action.PASS,) * 2 + (Action.LOG,)
        )
    )
    protocol = draw(
        st.sampled_from((None, None, None, "tcp", "tcp", "udp", "udp", "icmp", "icmpv6"))
    )
    fields: dict[str, object] = {}

    def maybe(name: str, strategy: st.SearchStrategy[object], percent: int) -> None:
        value = draw(_sometimes(strategy, percent))
        if value is not None:
            fields[name] = value

    maybe("ip_version", st.sampled_from((4, 6)), 10)
    if protocol is None:
        maybe("not_protocol", st.sampled_from(("tcp", "udp", "icmp", "icmpv6")), 20)
    nets = st.lists(cidrs(), min_size=1, max_size=3).map(tuple)
    for name in ("src_nets", "not_src_nets", "dst_nets", "not_dst_nets"):
        maybe(name, nets, 20)
    if protocol in ("tcp", "udp"):
        for name in ("dst_ports", "not_dst_ports"):
            maybe(name, _ranges(DST_WINDOW), 35)
        for name in ("src_ports", "not_src_ports"):
            maybe(name, _ranges(SRC_WINDOW), 15)
    maybe("dst_named_port_ip_set_ids", _set_ids(("np-dst", MISSING_SET)), 15)
    maybe("not_dst_named_port_ip_set_ids", _set_ids(("np-dst", MISSING_SET)), 8)
    maybe("src_named_port_ip_set_ids", _set_ids(("np-src", MISSING_SET)), 8)
    maybe("not_src_named_port_ip_set_ids", _set_ids(("np-src", MISSING_SET)), 5)
    for name in ("src_ip_set_ids", "dst_ip_set_ids"):
        maybe(name, _set_ids(_ADDRESS_SETS), 12)
    for name in ("not_src_ip_set_ids", "not_dst_ip_set_ids"):
        maybe(name, _set_ids(_ADDRESS_SETS), 8)
    maybe("dst_ip_port_set_ids", _set_ids(("np-dst", MISSING_SET)), 4)
    if protocol in ("icmp", "icmpv6"):
        # Probes send echo requests (code 0): echo, echo reply, unreachable.
        types = (8, 8, 0, 3) if protocol == "icmp" else (128, 128, 129, 1)
        icmp = st.builds(IcmpMatch, st.sampled_from(types), st.sampled_from((None, None, 0, 1)))
        maybe("icmp", icmp, 50)
        maybe("not_icmp", icmp, 20)
    return Rule(action, protocol=protocol, **fields)  # type: ignore[arg-type]


_RULE_LISTS = st.lists(rules(), max_size=3).map(tuple)


def _members(kind: IPSetType) -> st.SearchStrategy[frozenset[str]]:
    everyone = [addr for addrs in ADDRESSES.values() for addr in addrs] + ["10.65.9.9"]
    if kind is IPSetType.IP:
        return st.frozensets(st.sampled_from(everyone), max_size=4)
    if kind is IPSetType.NET:
        return st.frozensets(cidrs(), max_size=3)
    raise ValueError(kind)


def _named_ports(window: tuple[int, int]) -> st.SearchStrategy[frozenset[str]]:
    pods = [addr for name in ("a", "b") for addr in ADDRESSES[name]]
    member = st.tuples(
        st.sampled_from(pods), st.sampled_from(("tcp", "udp")), st.integers(*window)
    ).map(lambda t: f"{t[0]},{t[1]}:{t[2]}")
    return st.frozensets(member, max_size=4)


@st.composite
def _tiers(draw: st.DrawFn, keys: tuple[PolicyKey, ...]) -> tuple[TierInfo, ...]:
    if not keys:
        return ()
    names = draw(st.lists(st.sampled_from(TIER_NAMES), max_size=3, unique=True))
    some = st.lists(st.sampled_from(keys), max_size=2, unique=True).map(tuple)
    return tuple(
        TierInfo(
            name,
            draw(some),
            draw(some),
            draw(st.sampled_from((Action.DENY, Action.DENY, Action.PASS))),
        )
        for name in names
    )


def _boundaries(ranges: list[PortRange], window: tuple[int, int]) -> list[int]:
    points = {p for r in ranges for p in (r.first - 1, r.first, r.last, r.last + 1)}
    return sorted(p for p in points if window[0] <= p <= window[1])


@st.composite
def rounds(draw: st.DrawFn) -> Round:
    ipsets: dict[str, frozenset[str]] = {}
    for set_id, kind in IPSET_TYPES.items():
        if draw(st.integers(0, 9)) < 8:  # else the set does not exist this round
            if set_id == "np-dst":
                ipsets[set_id] = draw(_named_ports(DST_WINDOW))
            elif set_id == "np-src":
                ipsets[set_id] = draw(_named_ports(SRC_WINDOW))
            else:
                ipsets[set_id] = draw(_members(kind))
    keys = tuple(draw(st.lists(st.sampled_from(POLICY_KEYS), max_size=3, unique=True)))
    policies = {
        key: Policy("default", draw(_RULE_LISTS), draw(_RULE_LISTS), namespace=key.namespace)
        for key in keys
    }
    open_rule = st.just((Rule(Action.ALLOW),))
    profiles = {
        name: Profile(
            draw(st.one_of(open_rule, _RULE_LISTS)), draw(st.one_of(open_rule, _RULE_LISTS))
        )
        for name in draw(st.lists(st.sampled_from(PROFILE_NAMES), max_size=2, unique=True))
    }
    profile_ids = (
        st.lists(st.sampled_from(sorted(profiles)), max_size=2, unique=True).map(tuple)
        if profiles
        else st.just(())
    )
    endpoints = {pod: EndpointPolicy(draw(_tiers(keys)), draw(profile_ids)) for pod in ("a", "b")}
    # Probe every edge the rules and named ports mention, and a base port.
    rule_lists = [(p.inbound, p.outbound) for p in policies.values()]
    rule_lists += [(p.inbound, p.outbound) for p in profiles.values()]
    all_rules = [r for lists in rule_lists for rules_ in lists for r in rules_]
    dst_ranges = [pr for r in all_rules for pr in (*r.dst_ports, *r.not_dst_ports)]
    src_ranges = [pr for r in all_rules for pr in (*r.src_ports, *r.not_src_ports)]
    for set_id, ranges in (("np-dst", dst_ranges), ("np-src", src_ranges)):
        for member in ipsets.get(set_id, ()):
            port = int(member.rpartition(":")[2])
            ranges.append(PortRange(port, port))
    dst_edges = _boundaries(dst_ranges, DST_WINDOW)
    src_edges = _boundaries(src_ranges, SRC_WINDOW)
    dst_ports = (
        draw(st.lists(st.sampled_from(dst_edges), max_size=5, unique=True)) if dst_edges else []
    )
    src_ports = (
        draw(st.lists(st.sampled_from(src_edges), max_size=3, unique=True)) if src_edges else []
    )
    return Round(
        ipsets=ipsets,
        policies=policies,
        profiles=profiles,
        endpoints=endpoints,
        dst_ports=tuple(sorted({DST_WINDOW[0], *dst_ports})),
        src_ports=tuple(sorted(src_ports)),
        numbers=draw(st.booleans()),
        pass_word=draw(st.sampled_from(("pass", "next-tier"))),
    )


# --- encoding ----------------------------------------------------------------------


def _protocol(name: str, numbers: bool) -> pb.Protocol:
    return pb.Protocol(number=PROTOCOL_NUMBERS[name]) if numbers else pb.Protocol(name=name)


def _ports(ranges: tuple[PortRange, ...]) -> list[pb.PortRange]:
    return [pb.PortRange(first=r.first, last=r.last) for r in ranges]


_REPEATED = (
    ("src_nets", "src_net"),
    ("not_src_nets", "not_src_net"),
    ("dst_nets", "dst_net"),
    ("not_dst_nets", "not_dst_net"),
    ("src_ip_set_ids", "src_ip_set_ids"),
    ("not_src_ip_set_ids", "not_src_ip_set_ids"),
    ("dst_ip_set_ids", "dst_ip_set_ids"),
    ("not_dst_ip_set_ids", "not_dst_ip_set_ids"),
    ("src_named_port_ip_set_ids", "src_named_port_ip_set_ids"),
    ("not_src_named_port_ip_set_ids", "not_src_named_port_ip_set_ids"),
    ("dst_named_port_ip_set_ids", "dst_named_port_ip_set_ids"),
    ("not_dst_named_port_ip_set_ids", "not_dst_named_port_ip_set_ids"),
    ("dst_ip_port_set_ids", "dst_ip_port_set_ids"),
)


def rule_pb(rule: Rule, *, numbers: bool = False, pass_word: str = "pass") -> pb.Rule:
    out = pb.Rule(action=pass_word if rule.action is Action.PASS else rule.action.value)
    if rule.ip_version:
        out.ip_version = pb.IPV4 if rule.ip_version == 4 else pb.IPV6
    if rule.protocol:
        out.protocol.CopyFrom(_protocol(rule.protocol, numbers))
    if rule.not_protocol:
        out.not_protocol.CopyFrom(_protocol(rule.not_protocol, numbers))
    for attr, name in _REPEATED:
        getattr(out, name).extend(getattr(rule, attr))
    for name in ("src_ports", "not_src_ports", "dst_ports", "not_dst_ports"):
        getattr(out, name).extend(_ports(getattr(rule, name)))
    for match, prefix in ((rule.icmp, ""), (rule.not_icmp, "not_")):
        if match is None:
            continue
        if match.code is None:
            setattr(out, f"{prefix}icmp_type", match.type)
        else:
            getattr(out, f"{prefix}icmp_type_code").CopyFrom(
                pb.IcmpTypeAndCode(type=match.type, code=match.code)
            )
    return out


def policy_key_pb(key: PolicyKey) -> pb.PolicyID:
    return pb.PolicyID(name=key.name, namespace=key.namespace, kind=key.kind)


def policy_pb(key: PolicyKey, policy: Policy, rnd: Round) -> pb.ActivePolicyUpdate:
    opts = {"numbers": rnd.numbers, "pass_word": rnd.pass_word}
    return pb.ActivePolicyUpdate(
        id=policy_key_pb(key),
        policy=pb.Policy(
            tier=policy.tier,
            namespace=policy.namespace,
            inbound_rules=[rule_pb(r, **opts) for r in policy.inbound],  # type: ignore[arg-type]
            outbound_rules=[rule_pb(r, **opts) for r in policy.outbound],  # type: ignore[arg-type]
        ),
    )


def profile_pb(name: str, profile: Profile, rnd: Round) -> pb.ActiveProfileUpdate:
    opts = {"numbers": rnd.numbers, "pass_word": rnd.pass_word}
    return pb.ActiveProfileUpdate(
        id=pb.ProfileID(name=name),
        profile=pb.Profile(
            inbound_rules=[rule_pb(r, **opts) for r in profile.inbound],  # type: ignore[arg-type]
            outbound_rules=[rule_pb(r, **opts) for r in profile.outbound],  # type: ignore[arg-type]
        ),
    )


_IPSET_TYPE_PB = {
    IPSetType.IP: pb.IPSetUpdate.IP,
    IPSetType.NET: pb.IPSetUpdate.NET,
    IPSetType.IP_AND_PORT: pb.IPSetUpdate.IP_AND_PORT,
}


def ipset_pb(set_id: str, members: frozenset[str], kind: IPSetType) -> pb.IPSetUpdate:
    return pb.IPSetUpdate(id=set_id, members=sorted(members), type=_IPSET_TYPE_PB[kind])


def endpoint_tiers_pb(tiers: tuple[TierInfo, ...]) -> list[pb.TierInfo]:
    return [
        pb.TierInfo(
            name=t.name,
            ingress_policies=[policy_key_pb(k) for k in t.ingress_policies],
            egress_policies=[policy_key_pb(k) for k in t.egress_policies],
            default_action="Pass" if t.default_action is Action.PASS else "Deny",
        )
        for t in tiers
    ]
