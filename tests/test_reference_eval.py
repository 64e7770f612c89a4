"""The reference evaluator on its own: Felix's rule and policy semantics."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
from tests.reference_eval import (
    Packet,
    PolicyState,
    endpoint_decision,
    forward_decision,
    rule_matches,
)

ALLOW, DENY, PASS, LOG = Action.ALLOW, Action.DENY, Action.PASS, Action.LOG

TCP = Packet("10.0.0.1", "10.0.1.5", "tcp", 40000, 8080)
UDP = Packet("10.0.0.1", "10.0.1.5", "udp", 40000, 53)
PING = Packet("10.0.0.1", "10.0.1.5", "icmp", icmp_type=8, icmp_code=0)
TCP6 = Packet("fd00::1", "fd00::1:5", "tcp", 40000, 8080)
PING6 = Packet("fd00::1", "fd00::1:5", "icmpv6", icmp_type=128, icmp_code=0)

SETS = PolicyState(
    ipsets={
        "src": {"10.0.0.1", "fd00::1"},
        "dst": {"10.0.1.5"},
        "other": {"10.9.9.9"},
        "nets": IPSet("nets", IPSetType.NET, frozenset({"10.0.1.0/24"})),
        "http": {"10.0.1.5,tcp:8080", "fd00::1:5,tcp:8080"},
        "dns-udp": {"10.0.1.5,udp:53"},
        "dns-tcp": {"10.0.1.5,tcp:53"},
        "client": {"10.0.0.1,tcp:40000"},
    }
)


def matches(packet: Packet = TCP, **fields: object) -> bool:
    return rule_matches(Rule(ALLOW, **fields), packet, SETS)  # type: ignore[arg-type]


def ports(*spec: int | tuple[int, int]) -> tuple[PortRange, ...]:
    return tuple(PortRange(p, p) if isinstance(p, int) else PortRange(*p) for p in spec)


# --- one rule ---------------------------------------------------------------


def test_an_empty_rule_matches_everything() -> None:
    assert all(matches(p) for p in (TCP, UDP, PING, TCP6, PING6))


def test_fields_and_together() -> None:
    assert matches(protocol="tcp", dst_nets=("10.0.1.0/24",), dst_ports=ports(8080))
    assert not matches(protocol="tcp", dst_nets=("10.0.1.0/24",), dst_ports=ports(8081))
    assert not matches(protocol="udp", dst_nets=("10.0.1.0/24",), dst_ports=ports(8080))


def test_values_within_a_positive_field_or() -> None:
    assert matches(src_nets=("192.168.0.0/16", "10.0.0.0/30"))
    assert matches(dst_ports=ports(22, (8000, 8080)), protocol="tcp")
    assert not matches(dst_ports=ports(22, (8000, 8079)), protocol="tcp")


def test_a_negated_field_must_match_none_of_its_values() -> None:
    assert matches(not_src_nets=("192.168.0.0/16", "10.1.0.0/16"))
    assert not matches(not_src_nets=("192.168.0.0/16", "10.0.0.1/32"))
    assert not matches(protocol="tcp", not_dst_ports=ports(22, (8080, 8090)))


def test_positive_and_negated_on_the_same_field_is_an_except() -> None:
    # An ipBlock with an except, as Calico sends it.
    block = {"dst_nets": ("10.0.0.0/16",), "not_dst_nets": ("10.0.1.5/32",)}
    assert not matches(TCP, **block)
    assert matches(Packet("10.0.0.1", "10.0.1.6", "tcp", 1, 2), **block)
    assert not matches(Packet("10.0.0.1", "10.1.0.1", "tcp", 1, 2), **block)


def test_cidr_edges() -> None:
    assert matches(dst_nets=("10.0.1.4/30",))  # .4-.7
    assert not matches(dst_nets=("10.0.1.0/30",))  # .0-.3
    assert not matches(dst_nets=("10.0.1.6/31",))  # .6-.7
    assert matches(dst_nets=("10.0.1.5/32",))
    assert matches(dst_nets=("0.0.0.0/0",))


def test_only_the_packets_family_counts() -> None:
    assert not matches(TCP6, src_nets=("10.0.0.0/8",))  # no v6 CIDR: cannot match
    assert matches(TCP6, src_nets=("10.0.0.0/8", "fd00::/64"))
    assert matches(TCP6, not_src_nets=("10.0.0.0/8",))  # vacuous for v6
    assert not matches(TCP6, not_src_nets=("10.0.0.0/8", "fd00::/64"))
    assert not matches(TCP6, dst_nets=("0.0.0.0/0",))
    assert matches(TCP6, dst_nets=("::/0",))


def test_ip_version() -> None:
    assert matches(TCP, ip_version=4) and not matches(TCP6, ip_version=4)
    assert matches(TCP6, ip_version=6) and not matches(TCP, ip_version=6)


def test_protocols_by_name_and_number() -> None:
    assert matches(TCP, protocol="tcp") and not matches(UDP, protocol="tcp")
    assert matches(UDP, not_protocol="tcp") and not matches(TCP, not_protocol="tcp")
    assert matches(Packet("10.0.0.1", "10.0.1.5", "132", 1, 2), protocol="sctp")
    assert matches(Packet("10.0.0.1", "10.0.1.5", "47"), protocol="47")
    # ICMP is a different protocol in each family.
    assert matches(PING, protocol="icmp") and not matches(PING6, protocol="icmp")
    assert matches(PING6, protocol="icmpv6") and not matches(PING, protocol="icmpv6")
    assert matches(PING6, not_protocol="icmp") and matches(PING, not_protocol="icmpv6")
    assert not matches(PING, protocol="icmp", not_protocol="icmp")


def test_icmp_type_and_code() -> None:
    assert matches(PING, protocol="icmp", icmp=IcmpMatch(8))
    assert matches(PING, protocol="icmp", icmp=IcmpMatch(8, 0))
    assert not matches(PING, protocol="icmp", icmp=IcmpMatch(8, 1))
    assert not matches(PING, protocol="icmp", icmp=IcmpMatch(0))
    assert matches(PING, protocol="icmp", not_icmp=IcmpMatch(0))
    assert not matches(PING, protocol="icmp", not_icmp=IcmpMatch(8))
    assert matches(PING, protocol="icmp", not_icmp=IcmpMatch(8, 3))
    assert matches(PING6, protocol="icmpv6", icmp=IcmpMatch(128))
    assert not matches(PING6, icmp=IcmpMatch(8))  # ICMPv4's echo type: not ICMPv4
    assert not matches(TCP, icmp=IcmpMatch(8))


def test_port_range_edges() -> None:
    rng = {"protocol": "tcp", "dst_ports": ports((8080, 8090))}
    for port, expected in ((8079, False), (8080, True), (8090, True), (8091, False)):
        assert matches(Packet("10.0.0.1", "10.0.1.5", "tcp", 1, port), **rng) is expected
    assert matches(protocol="tcp", src_ports=ports((40000, 40000)))
    assert not matches(protocol="tcp", not_src_ports=ports((39999, 40001)))


def test_named_ports_or_with_numeric_ports_and_match_protocol_and_address() -> None:
    assert matches(TCP, dst_named_port_ip_set_ids=("http",))
    assert matches(TCP6, dst_named_port_ip_set_ids=("http",))
    assert matches(TCP, protocol="tcp", dst_ports=ports(22), dst_named_port_ip_set_ids=("http",))
    assert matches(UDP, dst_named_port_ip_set_ids=("dns-udp",))
    assert not matches(UDP, dst_named_port_ip_set_ids=("dns-tcp",))  # wrong protocol
    other_dst = Packet("10.0.0.1", "10.0.1.6", "tcp", 40000, 8080)
    assert not matches(other_dst, dst_named_port_ip_set_ids=("http",))  # wrong address
    assert matches(TCP, src_named_port_ip_set_ids=("client",))
    assert not matches(TCP, not_src_named_port_ip_set_ids=("client",))
    assert not matches(TCP, not_dst_named_port_ip_set_ids=("dns-tcp", "http"))


def test_a_packet_without_ports_fails_positive_and_passes_negated_port_fields() -> None:
    assert not matches(PING, dst_named_port_ip_set_ids=("http",))
    assert matches(PING, not_dst_named_port_ip_set_ids=("http",))


def test_ip_sets_and_set_by_set_and_negated_sets_must_all_miss() -> None:
    assert matches(src_ip_set_ids=("src",), dst_ip_set_ids=("dst", "nets"))
    assert not matches(dst_ip_set_ids=("dst", "other"))
    assert matches(not_dst_ip_set_ids=("other", "src"))
    assert not matches(not_dst_ip_set_ids=("other", "nets"))
    assert matches(TCP6, src_ip_set_ids=("src",))
    assert not matches(TCP6, dst_ip_set_ids=("dst",))  # no v6 member


def test_a_missing_ip_set_is_empty() -> None:
    assert not matches(src_ip_set_ids=("missing",))
    assert matches(not_src_ip_set_ids=("missing",))
    assert not matches(protocol="tcp", dst_named_port_ip_set_ids=("missing",))
    assert matches(protocol="tcp", dst_ports=ports(8080), dst_named_port_ip_set_ids=("missing",))
    assert matches(not_dst_named_port_ip_set_ids=("missing",))
    assert not matches(dst_ip_port_set_ids=("missing",))


def test_dst_ip_port_sets_and_together() -> None:
    assert matches(dst_ip_port_set_ids=("http",))
    assert not matches(dst_ip_port_set_ids=("http", "dns-tcp"))
    assert not matches(UDP, dst_ip_port_set_ids=("http",))


addresses_v4 = st.integers(0, 2**32 - 1).map(lambda n: str(ipaddress.IPv4Address(n)))
nets_v4 = st.tuples(addresses_v4, st.integers(0, 32)).map(
    lambda t: str(ipaddress.ip_network(f"{t[0]}/{t[1]}", strict=False))
)


@given(dst=addresses_v4, nets=st.lists(nets_v4, min_size=1, max_size=4))
def test_a_negated_net_field_is_the_complement_of_the_positive_one(
    dst: str, nets: list[str]
) -> None:
    packet = Packet("10.0.0.1", dst, "udp", 1, 2)
    assert matches(packet, dst_nets=tuple(nets)) != matches(packet, not_dst_nets=tuple(nets))


@given(
    port=st.integers(0, 65535),
    ranges=st.lists(
        st.tuples(st.integers(0, 65535), st.integers(0, 100)).map(
            lambda t: PortRange(t[0], min(t[0] + t[1], 65535))
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_a_negated_port_field_is_the_complement_of_the_positive_one(
    port: int, ranges: list[PortRange]
) -> None:
    packet = Packet("10.0.0.1", "10.0.1.5", "tcp", port, port)
    for field in ("src_ports", "dst_ports"):
        positive = matches(packet, protocol="tcp", **{field: tuple(ranges)})
        negated = matches(packet, protocol="tcp", **{f"not_{field}": tuple(ranges)})
        assert positive != negated


# --- an endpoint's policy ----------------------------------------------------

A = WorkloadEndpoint(
    WorkloadEndpointKey("k8s", "ns/a", "eth0"),
    "cali-a",
    ipv4_nets=("10.0.0.1/32",),
    ipv6_nets=("fd00::1/128",),
)
B = WorkloadEndpoint(
    WorkloadEndpointKey("k8s", "ns/b", "eth0"), "cali-b", ipv4_nets=("10.0.1.5/32",)
)


def key(name: str) -> PolicyKey:
    return PolicyKey(name, "ns", "NetworkPolicy")


def state(policies: dict[str, tuple[Rule, ...]], **profiles: tuple[Rule, ...]) -> PolicyState:
    return PolicyState(
        policies={key(n): Policy("t", inbound=r, outbound=r) for n, r in policies.items()},
        profiles={n: Profile(r, r) for n, r in profiles.items()},
        ipsets=SETS.ipsets,
    )


def tier(name: str, *policies: str, default: Action = DENY) -> TierInfo:
    keys = tuple(key(p) for p in policies)
    return TierInfo(name, keys, keys, default)


def decide(ep: WorkloadEndpoint, st_: PolicyState, packet: Packet = TCP) -> tuple[bool, str]:
    d = endpoint_decision(ep, "ingress", packet, st_)
    return d.allowed, d.reason


def with_tiers(*tiers: TierInfo, profiles: tuple[str, ...] = ()) -> WorkloadEndpoint:
    return WorkloadEndpoint(B.key, B.name, ipv4_nets=B.ipv4_nets, tiers=tiers, profile_ids=profiles)


def test_first_matching_rule_decides_and_log_goes_on() -> None:
    s = state({"p": (Rule(LOG), Rule(DENY, protocol="udp"), Rule(ALLOW), Rule(DENY))})
    expected = "ingress cali-b: tier t policy NetworkPolicy:ns/p rule 2 (allow)"
    assert decide(with_tiers(tier("t", "p")), s) == (True, expected)
    assert decide(with_tiers(tier("t", "p")), s, UDP)[0] is False


def test_end_of_tier_drops_or_passes() -> None:
    s = state({"none": (Rule(DENY, protocol="udp"),)}, open=(Rule(ALLOW),))
    allowed, reason = decide(with_tiers(tier("t", "none"), profiles=("open",)), s)
    assert not allowed and reason.endswith("end of tier t")
    ep = with_tiers(tier("t", "none", default=PASS), profiles=("open",))
    assert decide(ep, s) == (True, "ingress cali-b: profile open rule 0 (allow)")


def test_pass_skips_the_rest_of_the_tier_to_the_next() -> None:
    s = state({"pass": (Rule(PASS),), "deny": (Rule(DENY),), "allow": (Rule(ALLOW),)})
    ep = with_tiers(tier("t1", "pass", "deny"), tier("t2", "allow"))
    assert decide(ep, s)[0] is True
    ep = with_tiers(tier("t1", "pass", "allow"), tier("t2", "deny"))
    assert decide(ep, s)[0] is False


def test_profiles_only_after_every_tier_passed() -> None:
    s = state({"pass": (Rule(PASS),)}, closed=(Rule(DENY),), open=(Rule(ALLOW),))
    assert decide(with_tiers(tier("t", "pass"), profiles=("open",)), s)[0] is True
    assert decide(with_tiers(tier("t", "pass"), profiles=("closed", "open")), s)[0] is False
    assert decide(with_tiers(tier("t", "pass")), s)[1].endswith("no policy or profile allowed it")


def test_a_tier_without_policies_for_the_direction_is_skipped() -> None:
    s = state({"deny": (Rule(DENY),)}, open=(Rule(ALLOW),))
    egress_only = TierInfo("t", (), (key("deny"),))
    assert decide(with_tiers(egress_only, profiles=("open",)), s)[0] is True
    out = endpoint_decision(with_tiers(egress_only, profiles=("open",)), "egress", TCP, s)
    assert out.allowed is False  # (B's own address is not TCP's source: anti-spoofing)


def test_pass_in_a_profile_ends_that_profile() -> None:
    s = state({}, first=(Rule(PASS), Rule(DENY)), second=(Rule(ALLOW),))
    assert decide(with_tiers(profiles=("first", "second")), s)[0] is True
    assert decide(with_tiers(profiles=("first",)), s)[0] is False


def test_no_tiers_and_no_profiles_drop() -> None:
    assert decide(with_tiers(), state({}))[0] is False


def test_inactive_endpoints_and_spoofed_sources_are_dropped() -> None:
    s = state({}, open=(Rule(ALLOW),))
    down = WorkloadEndpoint(B.key, B.name, state="inactive", profile_ids=("open",))
    assert decide(down, s)[0] is False
    a = WorkloadEndpoint(A.key, A.name, ipv4_nets=A.ipv4_nets, profile_ids=("open",))
    assert endpoint_decision(a, "egress", TCP, s).allowed
    spoofed = Packet("10.0.0.2", "10.0.1.5", "tcp", 1, 2)
    assert not endpoint_decision(a, "egress", spoofed, s).allowed


@pytest.mark.parametrize(
    ("src_profile", "dst_profile", "expected"),
    [("open", "open", True), ("closed", "open", False), ("open", "closed", False)],
)
def test_forwarding_needs_the_sources_egress_and_the_destinations_ingress(
    src_profile: str, dst_profile: str, expected: bool
) -> None:
    s = state({}, open=(Rule(ALLOW),), closed=())
    a = WorkloadEndpoint(A.key, A.name, ipv4_nets=A.ipv4_nets, profile_ids=(src_profile,))
    b = WorkloadEndpoint(B.key, B.name, ipv4_nets=B.ipv4_nets, profile_ids=(dst_profile,))
    decision = forward_decision(a, b, TCP, s)
    assert decision.allowed is expected
    if not expected:
        assert ("egress" if src_profile == "closed" else "ingress") in decision.reason
