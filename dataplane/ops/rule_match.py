"""One packet against one policy rule, as Felix means it. Pure.

A rule matches when every field it sets matches; the field-by-field
semantics (families, negations, IP sets and named ports, ICMP) are in
:mod:`dataplane.ops.evaluate`'s account, whose decisions walk rules with
:func:`rule_matches` and name the field that failed with
:func:`rule_mismatch`.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Literal

from dataplane.model import (
    IcmpMatch,
    IPSet,
    Policy,
    PolicyKey,
    PortRange,
    Profile,
    Rule,
    protocol_number,
)

__all__ = [
    "Packet",
    "PolicyState",
    "describe_rule",
    "in_any",
    "rule_matches",
    "rule_mismatch",
]

_PORT_PROTOCOLS = frozenset({6, 17, 132, 136})
_ICMP_PROTOCOLS = {4: 1, 6: 58}


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
        return _address(self.src).version

    @property
    def proto_number(self) -> int:
        return protocol_number(self.protocol)

    def __str__(self) -> str:
        if self.icmp_type is not None:
            what = f"{self.protocol} {self.icmp_type}/{self.icmp_code}"
        elif self.src_port is not None:
            what = f"{self.protocol} {self.src_port}->{self.dst_port}"
        elif self.dst_port is not None:
            what = f"{self.protocol} port {self.dst_port}"
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


# Parsing dominates evaluation (every rule names the same few CIDRs and a
# packet has two addresses), and parsed values are immutable: memoise.
@functools.lru_cache(maxsize=4096)
def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


@functools.lru_cache(maxsize=4096)
def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(text, strict=False)


def _same_address(a: str, b: str) -> bool:
    return _address(a) == _address(b)


def _in_net(addr: str, net: str) -> bool:
    """Is ``addr`` in ``net`` (a CIDR or a single address)? Families never mix."""
    a, n = _address(addr), _network(net)
    return a.version == n.version and a in n


def in_any(addr: str, nets: Iterable[str]) -> bool:
    """Is ``addr`` in any of ``nets`` (CIDRs or addresses, either family)?"""
    return any(_in_net(addr, n) for n in nets)


def _nets_match(addr: str, nets: Sequence[str], version: int, *, negated: bool) -> bool:
    """The packet's-family CIDRs only; see the module docstring."""
    own = [n for n in nets if _network(n).version == version]
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


def _checks(rule: Rule, packet: Packet, state: PolicyState) -> Iterator[tuple[str, bool]]:
    """Each field of ``rule`` and whether ``packet`` passes it, lazily, cheap ones first."""
    v, proto = packet.version, packet.proto_number
    src, dst = packet.src, packet.dst
    yield "ip_version", rule.ip_version is None or rule.ip_version == v
    yield "protocol", rule.protocol is None or protocol_number(rule.protocol) == proto
    yield "not_protocol", rule.not_protocol is None or protocol_number(rule.not_protocol) != proto
    yield "icmp", rule.icmp is None or _icmp_hit(rule.icmp, packet)
    yield "not_icmp", rule.not_icmp is None or not _icmp_hit(rule.not_icmp, packet)
    yield "src_nets", _nets_match(src, rule.src_nets, v, negated=False)
    yield "not_src_nets", _nets_match(src, rule.not_src_nets, v, negated=True)
    yield "dst_nets", _nets_match(dst, rule.dst_nets, v, negated=False)
    yield "not_dst_nets", _nets_match(dst, rule.not_dst_nets, v, negated=True)
    yield "src_ip_set_ids", all(state.in_set(s, src) for s in rule.src_ip_set_ids)
    yield "not_src_ip_set_ids", not any(state.in_set(s, src) for s in rule.not_src_ip_set_ids)
    yield "dst_ip_set_ids", all(state.in_set(s, dst) for s in rule.dst_ip_set_ids)
    yield "not_dst_ip_set_ids", not any(state.in_set(s, dst) for s in rule.not_dst_ip_set_ids)
    dst_port = packet.dst_port if proto in _PORT_PROTOCOLS else None
    yield (
        "dst_ip_port_set_ids",
        all(state.in_port_set(s, dst, proto, dst_port) for s in rule.dst_ip_port_set_ids),
    )
    sides: tuple[tuple[Literal["src", "dst"], bool, Sequence[PortRange], Sequence[str]], ...] = (
        ("src", False, rule.src_ports, rule.src_named_port_ip_set_ids),
        ("src", True, rule.not_src_ports, rule.not_src_named_port_ip_set_ids),
        ("dst", False, rule.dst_ports, rule.dst_named_port_ip_set_ids),
        ("dst", True, rule.not_dst_ports, rule.not_dst_named_port_ip_set_ids),
    )
    for side, negated, ranges, named in sides:
        name = f"{'not_' if negated else ''}{side}_ports"
        yield name, _ports_match(state, packet, side, ranges=ranges, named=named, negated=negated)


def rule_mismatch(rule: Rule, packet: Packet, state: PolicyState) -> str | None:
    """The first field of ``rule`` that ``packet`` fails (its name), or None if it matches.

    What an operator reads as "why did rule N not match". A port field
    and its named-port sets are one check, named by the range field
    (``dst_ports`` covers ``dst_named_port_ip_set_ids`` too).
    """
    return next((name for name, ok in _checks(rule, packet, state) if not ok), None)


def rule_matches(rule: Rule, packet: Packet, state: PolicyState) -> bool:
    """Does ``rule`` match ``packet``? (Its action plays no part.)"""
    return rule_mismatch(rule, packet, state) is None


def describe_rule(rule: Rule) -> str:
    """``allow protocol=tcp dst_ports=8080 [rule-id]``: the action and the fields it sets."""
    parts = [rule.action.value]
    for f in fields(rule):
        if f.name in ("action", "rule_id"):
            continue
        value = getattr(rule, f.name)
        if value is None or value == ():
            continue
        text = ",".join(str(v) for v in value) if isinstance(value, tuple) else str(value)
        parts.append(f"{f.name}={text}")
    if rule.rule_id:
        parts.append(f"[{rule.rule_id}]")
    return " ".join(parts)
