"""A reference evaluator of Calico (Felix) policy semantics, in plain Python.

What the renderers must mean, written the simplest way that could be right:
no marks, no chains, no kernel. Tests send real packets through what the
driver programmed and compare each verdict with this module's.

Semantics (Felix's; see ``dataplane/linux/rule_render.py`` and
``filter_render.py`` for how the Linux platform expresses them):

* A rule matches when every field it sets matches (fields AND). Within a
  positive field the values OR (any of the CIDRs, any port range or named
  port); a negated field matches only if none of its values does. IP set
  fields are the exception: each listed set must match (``src_ip_set_ids``
  ANDs set by set), and each negated set must not.
* Only the packet's own family counts: a positive CIDR list with no CIDR of
  that family cannot match; negated CIDRs of the other family are vacuous.
* ``ip_version`` restricts the family; ``protocol`` / ``not_protocol``
  compare protocol numbers (``icmp`` is 1, ``icmpv6`` 58).
* Port ranges and named ports (``ip,proto:port`` set members, matching
  address, protocol and port together) OR within one direction; a packet
  without ports (ICMP) never matches a positive port field and always
  satisfies a negated one.
* An IP set that does not exist is an empty set: a positive match on it
  fails, a negated one holds.
* An endpoint's decision for one direction: tiers in order, skipping tiers
  with no policy for that direction; in a tier, policies in order, rules in
  order: ``allow`` allows, ``deny`` drops, ``pass`` skips to the next tier,
  ``log`` goes on. A tier no rule decided ends in its default action (Deny
  drops, Pass goes on). Then (or with no tier at all) profiles in order:
  ``allow`` allows, ``deny`` drops, ``pass`` ends that profile. Nothing
  allowed: dropped.
* A workload's egress first drops sources that are not its own addresses
  (or an allowed spoofed prefix); an inactive endpoint drops everything.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from dataplane.model import (
    Action,
    IcmpMatch,
    IPSet,
    Policy,
    PolicyKey,
    PortRange,
    Profile,
    Rule,
    WorkloadEndpoint,
)

__all__ = [
    "PROTOCOL_NUMBERS",
    "Decision",
    "Direction",
    "Packet",
    "PolicyState",
    "endpoint_decision",
    "forward_decision",
    "rule_matches",
]

Direction = Literal["ingress", "egress"]

PROTOCOL_NUMBERS = {"icmp": 1, "tcp": 6, "udp": 17, "icmpv6": 58, "sctp": 132, "udplite": 136}
_PORT_PROTOCOLS = frozenset({6, 17, 132, 136})
_ICMP_PROTOCOLS = {4: 1, 6: 58}

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def protocol_number(name: str) -> int:
    """``tcp`` -> 6; a number as text -> that number."""
    return PROTOCOL_NUMBERS[name] if name in PROTOCOL_NUMBERS else int(name)


@dataclass(frozen=True, slots=True)
class Packet:
    """The first packet of a flow, as policy sees it.

    ``protocol`` is a name (``tcp``, ``icmpv6``) or a number as text; ports
    only for protocols that have them, ICMP type/code only for ICMP.
    """

    src: str
    dst: str
    protocol: str
    src_port: int | None = None
    dst_port: int | None = None
    icmp_type: int | None = None
    icmp_code: int | None = None

    @property
    def version(self) -> int:
        return ipaddress.ip_address(self.src).version

    @property
    def proto_number(self) -> int:
        return protocol_number(self.protocol)

    def __str__(self) -> str:
        if self.icmp_type is not None:
            what = f"{self.protocol} {self.icmp_type}/{self.icmp_code}"
        elif self.src_port is not None:
            what = f"{self.protocol} {self.src_port}->{self.dst_port}"
        else:
            what = self.protocol
        return f"{self.src} -> {self.dst} {what}"


def _members(value: IPSet | Collection[str]) -> Collection[str]:
    return value.members if isinstance(value, IPSet) else value


@dataclass(frozen=True)
class PolicyState:
    """Everything a decision depends on besides the endpoints themselves.

    ``ipsets`` maps set ids to members (canonical text of any set type:
    ``10.0.0.1``, ``10.0.0.0/24``, ``10.0.0.1,tcp:80``); a model
    :class:`IPSet` works too.
    """

    policies: Mapping[PolicyKey, Policy] = field(default_factory=dict)
    profiles: Mapping[str, Profile] = field(default_factory=dict)
    ipsets: Mapping[str, IPSet | Collection[str]] = field(default_factory=dict)

    def in_set(self, set_id: str, addr: str) -> bool:
        """Address membership; a missing set is empty."""
        members = self.ipsets.get(set_id)
        return members is not None and any(
            "," not in m and _in_net(addr, m) for m in _members(members)
        )

    def in_port_set(self, set_id: str, addr: str, proto: int, port: int | None) -> bool:
        """``addr,proto:port`` membership; a missing set is empty."""
        members = self.ipsets.get(set_id)
        if members is None or port is None:
            return False
        for member in _members(members):
            m_addr, comma, m_proto_port = member.rpartition(",")
            if not comma:
                continue
            m_proto, _, m_port = m_proto_port.partition(":")
            if (
                protocol_number(m_proto) == proto
                and int(m_port) == port
                and _same_address(addr, m_addr)
            ):
                return True
        return False


def _same_address(a: str, b: str) -> bool:
    return ipaddress.ip_address(a) == ipaddress.ip_address(b)


def _in_net(addr: str, net: str) -> bool:
    """Is ``addr`` in ``net`` (a CIDR or a single address)? Families never mix."""
    a = ipaddress.ip_address(addr)
    n = ipaddress.ip_network(net, strict=False)
    return a.version == n.version and a in n


def _nets_match(addr: str, nets: Sequence[str], version: int, *, negated: bool) -> bool:
    """The packet's-family CIDRs only; see the module docstring."""
    own = [n for n in nets if ipaddress.ip_network(n, strict=False).version == version]
    hit = any(_in_net(addr, n) for n in own)
    if negated:
        return not hit
    return not nets or hit


def _in_ranges(port: int | None, ranges: Iterable[PortRange]) -> bool:
    return port is not None and any(r.first <= port <= r.last for r in ranges)


def _ports_match(
    state: PolicyState,
    packet: Packet,
    side: Literal["src", "dst"],
    *,
    ranges: Sequence[PortRange],
    named: Sequence[str],
    negated: bool,
) -> bool:
    """Port ranges OR named ports, on the packet's ``side``."""
    proto = packet.proto_number
    addr = packet.src if side == "src" else packet.dst
    # A packet without ports is never in a range and never a named port.
    port = (
        (packet.src_port if side == "src" else packet.dst_port)
        if proto in _PORT_PROTOCOLS
        else None
    )
    hit = _in_ranges(port, ranges) or any(state.in_port_set(s, addr, proto, port) for s in named)
    if negated:
        return not hit
    return not (ranges or named) or hit


def _icmp_hit(match: IcmpMatch, packet: Packet) -> bool:
    return (
        packet.proto_number == _ICMP_PROTOCOLS[packet.version]
        and packet.icmp_type == match.type
        and (match.code is None or packet.icmp_code == match.code)
    )


def rule_matches(rule: Rule, packet: Packet, state: PolicyState) -> bool:
    """Does ``rule`` match ``packet``? (Its action plays no part.)"""
    v, proto = packet.version, packet.proto_number
    if rule.ip_version is not None and rule.ip_version != v:
        return False
    if rule.protocol is not None and protocol_number(rule.protocol) != proto:
        return False
    if rule.not_protocol is not None and protocol_number(rule.not_protocol) == proto:
        return False
    if rule.icmp is not None and not _icmp_hit(rule.icmp, packet):
        return False
    if rule.not_icmp is not None and _icmp_hit(rule.not_icmp, packet):
        return False
    src, dst = packet.src, packet.dst
    dst_port = packet.dst_port if proto in _PORT_PROTOCOLS else None
    return (
        _nets_match(src, rule.src_nets, v, negated=False)
        and _nets_match(src, rule.not_src_nets, v, negated=True)
        and _nets_match(dst, rule.dst_nets, v, negated=False)
        and _nets_match(dst, rule.not_dst_nets, v, negated=True)
        and all(state.in_set(s, src) for s in rule.src_ip_set_ids)
        and not any(state.in_set(s, src) for s in rule.not_src_ip_set_ids)
        and all(state.in_set(s, dst) for s in rule.dst_ip_set_ids)
        and not any(state.in_set(s, dst) for s in rule.not_dst_ip_set_ids)
        and all(state.in_port_set(s, dst, proto, dst_port) for s in rule.dst_ip_port_set_ids)
        and _ports_match(
            state,
            packet,
            "src",
            ranges=rule.src_ports,
            named=rule.src_named_port_ip_set_ids,
            negated=False,
        )
        and _ports_match(
            state,
            packet,
            "src",
            ranges=rule.not_src_ports,
            named=rule.not_src_named_port_ip_set_ids,
            negated=True,
        )
        and _ports_match(
            state,
            packet,
            "dst",
            ranges=rule.dst_ports,
            named=rule.dst_named_port_ip_set_ids,
            negated=False,
        )
        and _ports_match(
            state,
            packet,
            "dst",
            ranges=rule.not_dst_ports,
            named=rule.not_dst_named_port_ip_set_ids,
            negated=True,
        )
    )


@dataclass(frozen=True, slots=True)
class Decision:
    """A verdict and the reason for it (which rule, tier end or default decided)."""

    allowed: bool
    reason: str

    def __str__(self) -> str:
        return f"{'allow' if self.allowed else 'drop'} ({self.reason})"


def _first_decisive(
    rules: Sequence[Rule], packet: Packet, state: PolicyState
) -> tuple[int, Action] | None:
    """Index and action of the first matching allow/deny/pass rule (log goes on)."""
    for index, rule in enumerate(rules):
        if rule.action is not Action.LOG and rule_matches(rule, packet, state):
            return index, rule.action
    return None


def endpoint_decision(
    endpoint: WorkloadEndpoint, direction: Direction, packet: Packet, state: PolicyState
) -> Decision:
    """What ``endpoint``'s policy decides for ``packet`` in ``direction``."""
    where = f"{direction} {endpoint.name}"
    if not endpoint.admin_up:
        return Decision(False, f"{where}: endpoint is {endpoint.state}")
    inbound = direction == "ingress"
    if not inbound:
        own = [*endpoint.ipv4_nets, *endpoint.ipv6_nets, *endpoint.allow_spoofed_source_prefixes]
        if not any(_in_net(packet.src, n) for n in own):
            return Decision(False, f"{where}: source is not the endpoint's")
    for tier in endpoint.tiers:
        keys = [
            k
            for k in (tier.ingress_policies if inbound else tier.egress_policies)
            if k in state.policies
        ]
        if not keys:
            continue
        passed = False
        for key in keys:
            policy = state.policies[key]
            hit = _first_decisive(policy.inbound if inbound else policy.outbound, packet, state)
            if hit is None:
                continue
            index, action = hit
            reason = f"{where}: tier {tier.name} policy {key} rule {index} ({action.value})"
            if action is Action.ALLOW:
                return Decision(True, reason)
            if action is Action.DENY:
                return Decision(False, reason)
            passed = True
            break
        if not passed and tier.default_action is Action.DENY:
            return Decision(False, f"{where}: end of tier {tier.name}")
    for name in endpoint.profile_ids:
        profile = state.profiles.get(name)
        if profile is None:
            continue
        hit = _first_decisive(profile.inbound if inbound else profile.outbound, packet, state)
        if hit is None or hit[1] is Action.PASS:
            continue
        index, action = hit
        reason = f"{where}: profile {name} rule {index} ({action.value})"
        return Decision(action is Action.ALLOW, reason)
    return Decision(False, f"{where}: no policy or profile allowed it")


def forward_decision(
    src: WorkloadEndpoint, dst: WorkloadEndpoint, packet: Packet, state: PolicyState
) -> Decision:
    """A new flow between two workloads on one node: the source's egress, then
    the destination's ingress; both must allow."""
    egress = endpoint_decision(src, "egress", packet, state)
    if not egress.allowed:
        return egress
    ingress = endpoint_decision(dst, "ingress", packet, state)
    if not ingress.allowed:
        return ingress
    return Decision(True, f"{egress.reason}; {ingress.reason}")
