"""Managers: proto in, model values out to a (sim) platform; bad input rejected."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from dataplane.errors import InputError
from dataplane.managers import EndpointManager, IPSetsManager, PolicyManager
from dataplane.managers.index import PolicyIndex
from dataplane.model import (
    Action,
    IcmpMatch,
    IPSet,
    IPSetType,
    PolicyKey,
    PortRange,
    Rule,
    TierInfo,
    WorkloadEndpointKey,
)
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.conftest import ipset, workload

# --- IP sets -------------------------------------------------------------------


class RecordingSink:
    """Keeps what the manager handed over, by kind (a state holder, not a mock)."""

    def __init__(self) -> None:
        self.replaced: dict[str, IPSet] = {}
        self.deltas: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
        self.removed: set[str] = set()

    def replace_ipset(self, s: IPSet) -> None:
        self.replaced[s.id] = s

    def update_ipset_members(self, set_id: str, a: frozenset[str], r: frozenset[str]) -> None:
        self.deltas[set_id] = (a, r)

    def remove_ipset(self, set_id: str) -> None:
        self.removed.add(set_id)


def test_full_update_is_normalised_and_sent_whole() -> None:
    sink = RecordingSink()
    mgr = IPSetsManager(sink, PolicyIndex())
    mgr.on_update(ipset("s:a", "10.0.0.1", "fd00:0::0001", "10.0.0.2/32"))
    mgr.on_update(ipset("s:n", "10.1.2.3/16", kind=pb.IPSetUpdate.NET))
    mgr.on_update(
        ipset("n:p", "10.0.0.1,TCP:80", "fd00::1,udp:53", kind=pb.IPSetUpdate.IP_AND_PORT)
    )
    mgr.complete_deferred_work()
    assert sink.replaced["s:a"] == IPSet(
        "s:a", IPSetType.IP, frozenset({"10.0.0.1", "10.0.0.2", "fd00::1"})
    )
    assert sink.replaced["s:n"].members == {"10.1.0.0/16"}
    assert sink.replaced["n:p"].members == {"10.0.0.1,tcp:80", "fd00::1,udp:53"}


def test_deltas_coalesce_until_apply() -> None:
    sink = RecordingSink()
    mgr = IPSetsManager(sink, PolicyIndex())
    mgr.on_update(ipset("s:a", "10.0.0.1"))
    mgr.complete_deferred_work()
    mgr.on_update(pb.IPSetDeltaUpdate(id="s:a", added_members=["10.0.0.2", "10.0.0.3"]))
    mgr.on_update(pb.IPSetDeltaUpdate(id="s:a", removed_members=["10.0.0.3", "10.0.0.1"]))
    mgr.complete_deferred_work()
    assert sink.deltas["s:a"] == (frozenset({"10.0.0.2"}), frozenset({"10.0.0.1", "10.0.0.3"}))


def test_delta_after_full_update_in_same_batch_sends_the_full_set() -> None:
    sink = RecordingSink()
    mgr = IPSetsManager(sink, PolicyIndex())
    mgr.on_update(ipset("s:a", "10.0.0.1"))
    mgr.on_update(pb.IPSetDeltaUpdate(id="s:a", added_members=["10.0.0.2"]))
    mgr.complete_deferred_work()
    assert sink.replaced["s:a"].members == {"10.0.0.1", "10.0.0.2"}
    assert "s:a" not in sink.deltas


def test_remove_then_recreate_in_one_batch_is_a_replace() -> None:
    sink = RecordingSink()
    mgr = IPSetsManager(sink, PolicyIndex())
    mgr.on_update(ipset("s:a", "10.0.0.1"))
    mgr.complete_deferred_work()
    mgr.on_update(pb.IPSetRemove(id="s:a"))
    mgr.on_update(ipset("s:a", "10.0.0.9"))
    mgr.complete_deferred_work()
    assert sink.replaced["s:a"].members == {"10.0.0.9"} and not sink.removed


@pytest.mark.parametrize(
    ("msg", "field"),
    [
        (ipset("s:a", "10.0.0.300"), "members[0]"),
        (ipset("s:a", "10.0.0.0/24"), "members[0]"),
        (ipset("s:a", "1.2.3.4,icmp:3", kind=pb.IPSetUpdate.IP_AND_PORT), "members[0]"),
        (ipset("s:a", "1.2.3.4,tcp:99999", kind=pb.IPSetUpdate.IP_AND_PORT), "members[0]"),
        (ipset("s:a", "nonsense", kind=pb.IPSetUpdate.NET), "members[0]"),
        # Found by fuzzing: a bad address inside a member crashed with ValueError.
        (ipset("s:a", "10.0.0.1", "10.0.0.999/32"), "members[1]"),
        (ipset("s:a", "1.2.3.4,tcp:80", "x,tcp:80", kind=pb.IPSetUpdate.IP_AND_PORT), "members[1]"),
        (ipset("s:a", "10.0.0.1\x00"), "members[0]"),
        (ipset("", "1.2.3.4"), "id"),
        (pb.IPSetDeltaUpdate(id="s:never", added_members=["1.2.3.4"]), "id"),
        (pb.IPSetUpdate(id="s:a", type=7), "type"),  # type: ignore[arg-type]
    ],
)
def test_invalid_ipset_input_is_rejected_without_changes(msg: pb.IPSetUpdate, field: str) -> None:
    sink = RecordingSink()
    mgr = IPSetsManager(sink, PolicyIndex())
    with pytest.raises(InputError) as info:
        mgr.on_update(msg)
    assert info.value.field == field
    mgr.complete_deferred_work()
    assert not (sink.replaced or sink.deltas or sink.removed)


def test_invalid_delta_leaves_the_set_untouched() -> None:
    platform = SimPlatform()
    mgr = IPSetsManager(platform, PolicyIndex())
    mgr.on_update(ipset("s:a", "10.0.0.1"))
    with pytest.raises(InputError):
        mgr.on_update(
            pb.IPSetDeltaUpdate(id="s:a", added_members=["10.0.0.2", "bad"], removed_members=[])
        )
    mgr.complete_deferred_work()
    assert platform.desired.ipsets["s:a"].members == {"10.0.0.1"}


_addr = st.integers(min_value=1, max_value=50).map(lambda i: f"10.0.0.{i}")


@given(
    st.lists(st.frozensets(_addr, max_size=5), min_size=1, max_size=1),
    st.lists(st.tuples(st.frozensets(_addr), st.frozensets(_addr), st.booleans()), max_size=15),
)
def test_sim_membership_equals_replaying_every_delta(
    initial: list[frozenset[str]], deltas: list[tuple[frozenset[str], frozenset[str], bool]]
) -> None:
    """Property: whatever the batching, the platform ends with the true membership."""
    platform = SimPlatform()
    mgr = IPSetsManager(platform, PolicyIndex())
    truth = set(initial[0])
    mgr.on_update(ipset("s:x", *sorted(truth)))
    for added, removed, apply_now in deltas:
        mgr.on_update(
            pb.IPSetDeltaUpdate(
                id="s:x", added_members=sorted(added), removed_members=sorted(removed)
            )
        )
        truth = (truth - removed) | added
        if apply_now:
            mgr.complete_deferred_work()
    mgr.complete_deferred_work()
    trio.run(platform.apply)
    assert platform.programmed.ipsets["s:x"].members == truth


# --- policies and profiles -------------------------------------------------------------


def _rule(**kwargs: object) -> pb.Rule:
    return pb.Rule(**kwargs)  # type: ignore[arg-type]


def test_every_rule_field_converts() -> None:
    platform = SimPlatform()
    mgr = PolicyManager(platform, PolicyIndex())
    rule = _rule(
        action="next-tier",
        ip_version=pb.IPV6,
        protocol=pb.Protocol(number=58),
        not_protocol=pb.Protocol(name="UDP"),
        src_net=["fd00::1/64"],
        not_src_net=["fd00:1::/64"],
        dst_net=["fd00:2::/64"],
        not_dst_net=["fd00:3::/64"],
        src_named_port_ip_set_ids=["n:a"],
        not_src_named_port_ip_set_ids=["n:b"],
        dst_named_port_ip_set_ids=["n:c"],
        not_dst_named_port_ip_set_ids=["n:d"],
        src_ip_set_ids=["s:a"],
        not_src_ip_set_ids=["s:b"],
        dst_ip_set_ids=["s:c"],
        not_dst_ip_set_ids=["s:d"],
        dst_ip_port_set_ids=["s:e"],
        icmp_type_code=pb.IcmpTypeAndCode(type=128, code=0),
        not_icmp_type=129,
        rule_id="r1",
    )
    mgr.on_update(
        pb.ActivePolicyUpdate(
            id=pb.PolicyID(name="p", namespace="ns", kind="NetworkPolicy"),
            policy=pb.Policy(tier="t1", inbound_rules=[rule], namespace="ns", pre_dnat=True),
        )
    )
    mgr.complete_deferred_work()
    policy = platform.desired.policies[PolicyKey("p", "ns", "NetworkPolicy")]
    assert policy.tier == "t1" and policy.pre_dnat and policy.namespace == "ns"
    assert policy.inbound == (
        Rule(
            action=Action.PASS,
            ip_version=6,
            protocol="icmpv6",
            not_protocol="udp",
            src_nets=("fd00::/64",),
            not_src_nets=("fd00:1::/64",),
            dst_nets=("fd00:2::/64",),
            not_dst_nets=("fd00:3::/64",),
            src_named_port_ip_set_ids=("n:a",),
            not_src_named_port_ip_set_ids=("n:b",),
            dst_named_port_ip_set_ids=("n:c",),
            not_dst_named_port_ip_set_ids=("n:d",),
            src_ip_set_ids=("s:a",),
            not_src_ip_set_ids=("s:b",),
            dst_ip_set_ids=("s:c",),
            not_dst_ip_set_ids=("s:d",),
            dst_ip_port_set_ids=("s:e",),
            icmp=IcmpMatch(128, 0),
            not_icmp=IcmpMatch(129),
            rule_id="r1",
        ),
    )
    assert policy.ip_set_ids() == {"n:a", "n:b", "n:c", "n:d", "s:a", "s:b", "s:c", "s:d", "s:e"}


def test_ports_and_ranges_convert() -> None:
    platform = SimPlatform()
    mgr = PolicyManager(platform, PolicyIndex())
    mgr.on_update(
        pb.ActiveProfileUpdate(
            id=pb.ProfileID(name="prof"),
            profile=pb.Profile(
                outbound_rules=[
                    _rule(
                        action="allow",
                        protocol=pb.Protocol(name="tcp"),
                        dst_ports=[
                            pb.PortRange(first=80, last=80),
                            pb.PortRange(first=1000, last=2000),
                        ],
                        not_src_ports=[pb.PortRange(first=22)],
                    )
                ]
            ),
        )
    )
    mgr.complete_deferred_work()
    rule = platform.desired.profiles["prof"].outbound[0]
    assert rule.dst_ports == (PortRange(80, 80), PortRange(1000, 2000))
    assert rule.not_src_ports == (PortRange(22, 22),)


@pytest.mark.parametrize(
    ("rule", "field", "value"),
    [
        (_rule(action="accept"), "policy.inbound_rules[0].action", "accept"),
        (
            _rule(action="allow", src_net=["10.0.0.0/33"]),
            "policy.inbound_rules[0].src_net[0]",
            "10.0.0.0/33",
        ),
        (
            _rule(action="allow", dst_ports=[pb.PortRange(first=80, last=80)]),
            "policy.inbound_rules[0].protocol",
            "",
        ),
        (
            _rule(
                action="allow",
                protocol=pb.Protocol(name="tcp"),
                dst_ports=[pb.PortRange(first=90, last=80)],
            ),
            "policy.inbound_rules[0].dst_ports[0]",
            "90-80",
        ),
        (
            _rule(action="allow", protocol=pb.Protocol(number=300)),
            "policy.inbound_rules[0].protocol.number",
            300,
        ),
        (
            _rule(action="allow", protocol=pb.Protocol(name="tcp"), icmp_type=8),
            "policy.inbound_rules[0].protocol",
            "tcp",
        ),
        (
            _rule(action="allow", protocol=pb.Protocol(number=0)),
            "policy.inbound_rules[0].protocol.number",
            0,
        ),
        (
            _rule(action="allow", protocol=pb.Protocol(name="icmp"), icmp_type=255),
            "policy.inbound_rules[0].icmp_type",
            "255",
        ),
        (
            _rule(action="allow", src_ip_set_ids=[""]),
            "policy.inbound_rules[0].src_ip_set_ids[0]",
            "",
        ),
    ],
)
def test_invalid_rules_name_the_field_and_value(rule: pb.Rule, field: str, value: object) -> None:
    platform = SimPlatform()
    mgr = PolicyManager(platform, PolicyIndex())
    msg = pb.ActivePolicyUpdate(id=pb.PolicyID(name="p"), policy=pb.Policy(inbound_rules=[rule]))
    with pytest.raises(InputError) as info:
        mgr.on_update(msg)
    assert (info.value.field, info.value.value) == (field, value)
    mgr.complete_deferred_work()
    assert platform.desired.policies == {}


def test_policy_remove_and_profile_remove() -> None:
    platform = SimPlatform()
    mgr = PolicyManager(platform, PolicyIndex())
    mgr.on_update(pb.ActivePolicyUpdate(id=pb.PolicyID(name="p"), policy=pb.Policy(tier="t")))
    mgr.on_update(pb.ActiveProfileUpdate(id=pb.ProfileID(name="prof"), profile=pb.Profile()))
    mgr.complete_deferred_work()
    assert PolicyKey("p") in platform.desired.policies and "prof" in platform.desired.profiles
    mgr.on_update(pb.ActivePolicyRemove(id=pb.PolicyID(name="p")))
    mgr.on_update(pb.ActiveProfileRemove(id=pb.ProfileID(name="prof")))
    mgr.complete_deferred_work()
    assert not platform.desired.policies and not platform.desired.profiles


# --- endpoints -------------------------------------------------------------------


def test_workload_endpoint_with_tiers_converts() -> None:
    platform = SimPlatform()
    mgr = EndpointManager(platform, PolicyIndex())
    msg = workload("ns/pod", "cali1234", "10.0.0.1/32")
    msg.endpoint.tiers.append(
        pb.TierInfo(
            name="security",
            ingress_policies=[pb.PolicyID(name="a"), pb.PolicyID(name="b", namespace="ns")],
            default_action="Pass",
        )
    )
    msg.endpoint.tiers.append(pb.TierInfo(name="default", egress_policies=[pb.PolicyID(name="c")]))
    msg.endpoint.ipv4_nat.append(pb.NatInfo(ext_ip="172.16.0.1", int_ip="10.0.0.1"))
    mgr.on_update(msg)
    mgr.complete_deferred_work()
    wep = platform.desired.workload_endpoints[WorkloadEndpointKey("k8s", "ns/pod", "eth0")]
    assert wep.name == "cali1234" and wep.ipv4_nets == ("10.0.0.1/32",)
    assert wep.tiers == (
        TierInfo("security", (PolicyKey("a"), PolicyKey("b", "ns")), (), Action.PASS),
        TierInfo("default", (), (PolicyKey("c"),), Action.DENY),
    )
    assert wep.ipv4_nat[0].ext_ip == "172.16.0.1"


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda m: m.endpoint.ipv4_nets.append("fd00::1/128"), "endpoint.ipv4_nets[1]"),
        (lambda m: setattr(m.endpoint, "name", ""), "endpoint.name"),
        (lambda m: setattr(m.endpoint, "name", "a-very-long-interface-name"), "endpoint.name"),
        (
            lambda m: m.endpoint.tiers.append(pb.TierInfo(name="t", default_action="Allow")),
            "endpoint.tiers[0].default_action",
        ),
        (lambda m: setattr(m.id, "workload_id", ""), "id.workload_id"),
        # Restore syntax, iptables wildcards and path steps never reach the kernel.
        (lambda m: setattr(m.endpoint, "name", "cali1\n-A X"), "endpoint.name"),
        (lambda m: setattr(m.endpoint, "name", "cali+"), "endpoint.name"),
        (lambda m: setattr(m.endpoint, "name", ".."), "endpoint.name"),
        (lambda m: setattr(m.endpoint, "name", 'ca"li'), "endpoint.name"),
        (lambda m: setattr(m.endpoint, "name", "cali\u00e9"), "endpoint.name"),
    ],
)
def test_invalid_workload_endpoints_are_rejected(mutate: object, field: str) -> None:
    msg = workload("ns/pod", "cali1", "10.0.0.1/32")
    mutate(msg)  # type: ignore[operator]
    platform = SimPlatform()
    mgr = EndpointManager(platform, PolicyIndex())
    with pytest.raises(InputError) as info:
        mgr.on_update(msg)
    assert info.value.field == field
    mgr.complete_deferred_work()
    assert not platform.desired.workload_endpoints


def test_host_endpoint_all_tier_kinds() -> None:
    platform = SimPlatform()
    mgr = EndpointManager(platform, PolicyIndex())
    tier = pb.TierInfo(name="t", ingress_policies=[pb.PolicyID(name="p")])
    mgr.on_update(
        pb.HostEndpointUpdate(
            id=pb.HostEndpointID(endpoint_id="node-eth0"),
            endpoint=pb.HostEndpoint(
                name="eth0",
                tiers=[tier],
                untracked_tiers=[tier],
                pre_dnat_tiers=[tier],
                forward_tiers=[tier],
                expected_ipv4_addrs=["192.168.1.1"],
            ),
        )
    )
    mgr.complete_deferred_work()
    (hep,) = platform.desired.host_endpoints.values()
    assert hep.untracked_tiers == hep.pre_dnat_tiers == hep.forward_tiers == hep.tiers
    mgr.on_update(pb.HostEndpointRemove(id=pb.HostEndpointID(endpoint_id="node-eth0")))
    mgr.complete_deferred_work()
    assert not platform.desired.host_endpoints


def test_host_endpoint_interface_name_is_validated() -> None:
    mgr = EndpointManager(SimPlatform(), PolicyIndex())
    with pytest.raises(InputError) as info:
        mgr.on_update(
            pb.HostEndpointUpdate(
                id=pb.HostEndpointID(endpoint_id="h"),
                endpoint=pb.HostEndpoint(name="eth0 -j ACCEPT"),
            )
        )
    assert info.value.field == "endpoint.name"


def test_felix_all_interfaces_host_endpoint_star_is_every_interface() -> None:
    # Felix sends interfaceName "*" verbatim; the model spells it "".
    platform = SimPlatform()
    mgr = EndpointManager(platform, PolicyIndex())
    for endpoint_id, name in (("star", "*"), ("empty", "")):
        mgr.on_update(
            pb.HostEndpointUpdate(
                id=pb.HostEndpointID(endpoint_id=endpoint_id),
                endpoint=pb.HostEndpoint(name=name, expected_ipv4_addrs=["192.168.1.1"]),
            )
        )
    mgr.complete_deferred_work()
    assert [h.name for h in platform.desired.host_endpoints.values()] == ["", ""]
    with pytest.raises(InputError):
        mgr.on_update(
            pb.HostEndpointUpdate(
                id=pb.HostEndpointID(endpoint_id="h"), endpoint=pb.HostEndpoint(name="eth*")
            )
        )
