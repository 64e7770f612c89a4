"""The packet evaluator decides as the issue's HNS semantics say."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dataplane.windows.hns.acl import Packet, endpoint_verdict, set_members
from dataplane.windows.hns.hcn import Json

TCP, UDP, ICMP = 6, 17, 1
POD, PEER = "10.0.0.5", "10.0.1.7"


def rule(action: str, direction: str, priority: int | None = None, **extra: object) -> Json:
    settings: Json = {"Action": action, "Direction": direction, "RuleType": "Switch", **extra}
    if priority is not None:
        settings["Priority"] = priority
    return {"Type": "ACL", "Settings": settings}


def ep(*rules: Json) -> Json:
    return {"ID": "E", "Policies": list(rules)}


def inbound(protocol: int = TCP, port: int | None = 80, src: str = PEER) -> Packet:
    return Packet(src, POD, protocol, None if port is None else 40000, port)


def test_no_acl_allows_everything_and_any_acl_blocks_the_rest() -> None:
    assert endpoint_verdict(ep(), "In", inbound(), {}).allowed
    only_out = ep(rule("Allow", "Out", 100))
    verdict = endpoint_verdict(only_out, "In", inbound(), {})
    assert not verdict.allowed and verdict.rule is None


def test_lowest_priority_wins_and_absent_priority_is_zero() -> None:
    rules = ep(rule("Block", "In", 200), rule("Allow", "In", 100, LocalPorts="80"))
    assert endpoint_verdict(rules, "In", inbound(port=80), {}).allowed
    assert not endpoint_verdict(rules, "In", inbound(port=81), {}).allowed
    zero = ep(rule("Allow", "In", 1), rule("Block", "In", None))
    assert not endpoint_verdict(zero, "In", inbound(), {}).allowed


def test_local_and_remote_follow_the_direction() -> None:
    rules = ep(
        rule("Allow", "In", 10, LocalAddresses=POD, RemoteAddresses="10.0.1.0/24"),
        rule("Allow", "Out", 10, LocalAddresses=POD, RemoteAddresses=PEER, RemotePorts="53"),
    )
    assert endpoint_verdict(rules, "In", inbound(src=PEER), {}).allowed
    assert not endpoint_verdict(rules, "In", inbound(src="10.0.2.1"), {}).allowed
    out = Packet(POD, PEER, UDP, 40000, 53)
    assert endpoint_verdict(rules, "Out", out, {}).allowed
    assert not endpoint_verdict(rules, "Out", Packet(POD, PEER, UDP, 40000, 54), {}).allowed


def test_ports_never_match_icmp_and_protocol_256_is_any() -> None:
    rules = ep(rule("Allow", "In", 10, Protocols="256", LocalPorts="0-65535"))
    assert endpoint_verdict(rules, "In", inbound(TCP, 22), {}).allowed
    assert not endpoint_verdict(rules, "In", inbound(ICMP, None), {}).allowed
    icmp = ep(rule("Allow", "In", 10, Protocols="1"))
    assert endpoint_verdict(icmp, "In", inbound(ICMP, None), {}).allowed
    assert not endpoint_verdict(icmp, "In", inbound(UDP, 53), {}).allowed


def test_host_rules_do_not_apply_between_endpoints() -> None:
    host_rule = rule("Allow", "In", 1)
    host_rule["Settings"]["RuleType"] = "Host"
    assert not endpoint_verdict(ep(host_rule), "In", inbound(), {}).allowed


def test_addresses_may_name_sets_and_nested_sets() -> None:
    network = {
        "Policies": [
            {"Type": "SetPolicy", "Settings": {"Id": "a", "PolicyType": "IPSET", "Values": PEER}},
            {
                "Type": "SetPolicy",
                "Settings": {"Id": "b", "PolicyType": "IPSET", "Values": "192.168.0.0/16"},
            },
            {
                "Type": "SetPolicy",
                "Settings": {"Id": "n", "PolicyType": "NESTEDIPSET", "Values": "a,b"},
            },
        ]
    }
    sets = set_members(network)
    rules = ep(rule("Allow", "In", 10, RemoteAddresses="n"))
    assert endpoint_verdict(rules, "In", inbound(src=PEER), sets).allowed
    assert endpoint_verdict(rules, "In", inbound(src="192.168.3.4"), sets).allowed
    assert not endpoint_verdict(rules, "In", inbound(src="10.0.1.8"), sets).allowed


@given(
    st.lists(
        st.tuples(st.sampled_from(["Allow", "Block"]), st.integers(0, 5), st.booleans()),
        max_size=8,
    ),
    st.integers(1, 65535),
)
def test_the_verdict_is_the_first_hit_by_priority_with_block_winning_ties(
    spec: list[tuple[str, int, bool]], port: int
) -> None:
    # Each rule either matches every TCP packet or only port 1 (which we never send).
    rules = [rule(a, "In", p, LocalPorts="0-65535" if hits else "1") for a, p, hits in spec]
    packet = inbound(TCP, max(port, 2))
    verdict = endpoint_verdict(ep(*rules), "In", packet, {})
    hits = [(p, a != "Block", a) for a, p, h in spec if h]
    if not spec:
        assert verdict.allowed
    elif not hits:
        assert not verdict.allowed
    else:
        assert verdict.allowed == (min(hits)[2] == "Allow")
