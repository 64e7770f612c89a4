"""The rule model in nft syntax, for one IP version's table.

What iptables needs mark blocks for, nft mostly says in one rule:
several networks or ports are an anonymous set (``ip saddr { a, b }``),
negated with ``!=``. One OR is left that one nft rule cannot say -- ports
*or* named-port sets, a port match and a set lookup -- and it gets the
same scratch-mark block as in iptables: clear the bit, set it for each
alternative, require it. The final rule carries the model rule's action,
comment, origin and a ``counter``.

Networks are written canonical and collapsed (``10.1.2.3/8`` is
``10.0.0.0/8``; overlapping ones merged): nft's parser refuses
overlapping elements in some contexts, and the meaning is the same.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from dataplane.linux.nftables.names import nft_name
from dataplane.linux.rules.action import (
    Accept,
    Action,
    Dispatch,
    Dnat,
    Drop,
    Goto,
    Jump,
    Log,
    Masquerade,
    Notrack,
    Reject,
    Return,
    SetDscp,
    SetMark,
    Snat,
)
from dataplane.linux.rules.comment import safe_comment
from dataplane.linux.rules.marks import Marks, ScratchBits
from dataplane.linux.rules.match import (
    LIMIT_RATE,
    Addresses,
    ConnLimit,
    ConnState,
    Icmp,
    InSet,
    Interface,
    Limit,
    LocalAddress,
    MarkMatch,
    Match,
    Port,
    Ports,
    Protocol,
    SetKind,
    Side,
)
from dataplane.linux.rules.rule import Origin, TableRule
from dataplane.model import PortRange

__all__ = ["NftRule", "NftSerialiser", "collapse"]

_ALL = 0xFFFFFFFF
_COMMENT_MAX = 127  # bytes nft keeps of a rule's comment
# Interface names as the kernel takes them (no space, quote, slash), with +;
# no braces either, which would confuse a reader of the listing.
_IFACE = re.compile(r"[^\s\"/\\{}]{1,15}\+?")
_LEVELS = ("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug")


@dataclass(frozen=True, slots=True)
class NftRule:
    """One nft rule: its statements as ``add rule`` takes them, and a label.

    ``comment`` is already reduced to the label alphabet; :meth:`written`
    puts it, after the table's identity tag, in the rule's one comment.
    """

    text: str
    comment: str = ""
    origin: Origin | None = None
    counts: bool = False

    def written(self, tag: str = "") -> str:
        label = " ".join(part for part in (tag, self.comment) if part)[:_COMMENT_MAX]
        return f'{self.text} comment "{label}"' if label else self.text


def collapse(nets: Iterable[str]) -> list[str]:
    """``nets`` canonical, overlaps merged, sorted (one family)."""
    parsed = [ipaddress.ip_network(n, strict=False) for n in nets]
    v4 = [n for n in parsed if isinstance(n, ipaddress.IPv4Network)]
    v6 = [n for n in parsed if isinstance(n, ipaddress.IPv6Network)]
    merged = [*ipaddress.collapse_addresses(v4), *ipaddress.collapse_addresses(v6)]
    return [str(n) for n in merged]


def _address(text: str) -> str:
    """One address, checked (it is written unquoted)."""
    return str(ipaddress.ip_address(text))


def _one_or_set(values: Sequence[str]) -> str:
    return values[0] if len(values) == 1 else "{ " + ", ".join(values) + " }"


def _ports(ranges: Sequence[PortRange]) -> str:
    return _one_or_set([str(p) for p in ranges])


def _protocol(name: str) -> str:
    return "ipv6-icmp" if name == "icmpv6" else name


def mark_text(mask: int, value: int) -> str:
    """Set the mark's ``mask`` bits to ``value``, keeping the others."""
    if mask == _ALL:
        return f"meta mark set {value:#x}"
    keep = f"meta mark & {~mask & _ALL:#x}"
    return f"meta mark set {keep} | {value:#x}" if value else f"meta mark set {keep}"


def action_text(action: Action | None, chain_prefix: str = "") -> str:
    """``action`` in nft syntax; jumps and gotos to ``chain_prefix`` + the chain."""
    match action:
        case None:
            return ""
        case Accept():
            return "accept"
        case Drop():
            return "drop"
        case Notrack():
            return "notrack"
        case Reject(tcp_reset):
            return "reject with tcp reset" if tcp_reset else "reject"
        case Return():
            return "return"
        case Jump(chain):
            return f"jump {nft_name(chain_prefix + chain)}"
        case Goto(chain):
            return f"goto {nft_name(chain_prefix + chain)}"
        case SetMark(mask, value):
            return mark_text(mask, value)
        case SetDscp(value, version):
            if not 0 <= value <= 63:
                raise ValueError(f"not a DSCP value: {value!r}")
            return f"{'ip' if version == 4 else 'ip6'} dscp set {int(value)}"
        case Dnat(to):
            return f"dnat to {_address(to)}"
        case Snat(to, ports):
            if ports is None:
                return f"snat to {_address(to)}"
            return f"snat to {_address(to)}:{ports[0]}-{ports[1]}"
        case Masquerade(ports):
            if ports is None:
                return "masquerade"
            first, last = ports
            return f"masquerade to :{first}" + (f"-{last}" if last != first else "")
        case Log(prefix, level):
            # The prefix is configuration (LogPrefix), checked at the edge.
            return f'log prefix "{prefix}" level {_LEVELS[level]}'
        case Dispatch(name, inbound):
            return f"{'iifname' if inbound else 'oifname'} vmap @{nft_name(name)}"


@dataclass(slots=True)
class _Rendering:
    version: int
    scratch: ScratchBits
    origin: Origin | None
    blocks: list[NftRule] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    protocol: str = ""  # the positive protocol match, repeated in port alternatives

    @property
    def ip(self) -> str:
        return "ip" if self.version == 4 else "ip6"

    def address(self, side: Side) -> str:
        return f"{self.ip} {'saddr' if side is Side.SRC else 'daddr'}"

    def set_key(self, side: Side, kind: SetKind) -> str:
        if kind is SetKind.ADDRESSES:
            return self.address(side)
        if kind is SetKind.INTERFACE_ADDRESSES:
            return f"{'iifname' if side is Side.SRC else 'oifname'} . {self.address(side)}"
        port = "th sport" if side is Side.SRC else "th dport"
        return f"{self.address(side)} . meta l4proto . {port}"

    def ports(self, term: Ports) -> None:
        port = "th sport" if term.side is Side.SRC else "th dport"
        key = self.set_key(term.side, SetKind.ADDRESS_PORTS)
        if term.negate:
            if term.ranges:
                self.parts.append(f"{port} != {_ports(term.ranges)}")
            self.parts.extend(f"{key} != @{nft_name(n)}" for n in term.named)
            return
        alternatives = ([f"{port} {_ports(term.ranges)}"] if term.ranges else []) + [
            f"{key} @{nft_name(n)}" for n in term.named
        ]
        if not alternatives:
            raise ValueError("a port term with no ports or sets matches nothing")
        if len(alternatives) == 1:
            self.parts.append(alternatives[0])
            return
        bit = self.scratch.take(f"{term.side.value}_port")
        self.blocks.append(NftRule(mark_text(bit, 0), origin=self.origin))
        self.blocks.extend(
            NftRule(f"{self.protocol} {alt} {mark_text(bit, bit)}".strip(), origin=self.origin)
            for alt in alternatives
        )
        self.parts.append(f"meta mark & {bit:#x} == {bit:#x}")

    def term(self, term: Match) -> None:
        match term:
            case Protocol(name, negate):
                text = f"meta l4proto {'!= ' if negate else ''}{_protocol(name)}"
                if not negate:
                    self.protocol = text
                self.parts.append(text)
            case Addresses(side, nets, negate):
                if not nets:
                    raise ValueError("an address term with no networks matches nothing")
                op = "!= " if negate else ""
                self.parts.append(f"{self.address(side)} {op}{_one_or_set(collapse(nets))}")
            case InSet(side, name, kind, negate):
                op = "!= " if negate else ""
                self.parts.append(f"{self.set_key(side, kind)} {op}@{nft_name(name)}")
            case Ports():
                self.ports(term)
            case Port(side, port):
                self.parts.append(f"th {side.value[0]}port {port}")
            case LocalAddress(side, negate, out_interface):
                key = f"{side.value[0]}addr . oif" if out_interface else f"{side.value[0]}addr"
                self.parts.append(f"fib {key} type {'!= ' if negate else ''}local")
            case Icmp(version, icmp, negate):
                icmp_kind = "icmp" if version == 4 else "icmpv6"
                if icmp.code is None:
                    self.parts.append(f"{icmp_kind} type {'!= ' if negate else ''}{icmp.type}")
                elif negate:
                    # Not (this type and this code): a concatenation, in a set.
                    self.parts.append(
                        f"{icmp_kind} type . {icmp_kind} code != {{ {icmp.type} . {icmp.code} }}"
                    )
                else:
                    self.parts.append(f"{icmp_kind} type {icmp.type} {icmp_kind} code {icmp.code}")
            case MarkMatch(mask, value):
                self.parts.append(f"meta mark & {mask:#x} == {value:#x}")
            case ConnState(states, negate):
                values = _one_or_set([s.lower() for s in states])
                self.parts.append(f"ct state {'!= ' if negate else ''}{values}")
            case Limit(rate, burst):
                if not LIMIT_RATE.fullmatch(rate):
                    raise ValueError(f"not a rate limit: {rate!r}")
                burst_text = f" burst {burst} packets" if burst else ""
                self.parts.append(f"limit rate {rate}{burst_text}")
            case ConnLimit(above):
                self.parts.append(f"ct count over {int(above)}")
            case Interface(name, inbound, negate):
                if not _IFACE.fullmatch(name):
                    raise ValueError(f"not an interface name: {name!r}")
                # + is nft's *.
                pattern = name[:-1] + "*" if name.endswith("+") else name
                key = "iifname" if inbound else "oifname"
                self.parts.append(f'{key} {"!= " if negate else ""}"{pattern}"')


@dataclass(frozen=True, slots=True)
class NftSerialiser:
    """Model rules to nft rules for one IP version; ``marks`` gives the scratch bits.

    ``chain_prefix`` names the iptables table a chain belongs to in our one
    nft table per family (``filter-``): every jump and goto gets it.
    """

    version: int
    marks: Marks | None = None
    chain_prefix: str = ""

    def rule(self, rule: TableRule) -> list[NftRule]:
        out = _Rendering(self.version, ScratchBits(self.marks), rule.origin)
        for term in rule.match:
            out.term(term)
        # Every rule counts its packets, as every iptables rule does (nft
        # counts only where told): what operators read to see which rule
        # judged a packet, and where the policy counters come from.
        statements = [*out.parts, "counter"]
        action = action_text(rule.action, self.chain_prefix)
        if action:
            statements = [*statements, action]
        comment = safe_comment(rule.comment)
        final = NftRule(" ".join(statements), comment, rule.origin, rule.counts)
        return [*out.blocks, final]

    def rules(self, rules: Iterable[TableRule]) -> tuple[NftRule, ...]:
        out: list[NftRule] = []
        for rule in rules:
            out.extend(self.rule(rule))
        return tuple(out)
