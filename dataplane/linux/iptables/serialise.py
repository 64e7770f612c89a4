"""The rule model in iptables syntax.

One model rule becomes one iptables rule, or a short block of them where
one iptables rule cannot say an OR: several networks on one side (each of
``-s`` and ``-d`` is taken once per rule), ports together with named-port
sets, or more than 15 multiport entries. The block clears a scratch mark
bit, sets it for each alternative, and the final rule requires it (any of
them) or its absence (none of them). The final rule carries the model
rule's action, comment and origin, and is the one whose counter counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from dataplane.linux.iptables.chains import IptRule
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

__all__ = ["IptablesSerialiser", "action_text", "mark_match"]

_MULTIPORT_MAX = 15  # entries per -m multiport; a range counts as two


def port_chunks(ports: Sequence[PortRange]) -> list[str]:
    """``ports`` as multiport lists of at most 15 entries each."""
    chunks: list[list[str]] = [[]]
    used = 0
    for p in ports:
        cost = 1 if p.first == p.last else 2
        if used + cost > _MULTIPORT_MAX:
            chunks.append([])
            used = 0
        chunks[-1].append(str(p.first) if p.first == p.last else f"{p.first}:{p.last}")
        used += cost
    return [",".join(c) for c in chunks if c]


def _protocol(name: str) -> str:
    return "ipv6-icmp" if name == "icmpv6" else name


def _set_match(name: str, side: Side, kind: SetKind, *, negate: bool) -> str:
    if kind is SetKind.INTERFACE_ADDRESSES:
        raise ValueError("an IP set holds no interfaces: nftables only")
    direction = side.value if kind is SetKind.ADDRESSES else f"{side.value},{side.value}"
    bang = "! " if negate else ""
    return f"-m set {bang}--match-set {name} {direction}"


def mark_match(term: MarkMatch) -> str:
    return f"-m mark --mark {term.value:#x}/{term.mask:#x}"


def _dscp(value: int) -> int:
    if not 0 <= value <= 63:
        raise ValueError(f"not a DSCP value: {value!r}")
    return int(value)


def action_text(action: Action | None) -> str:
    match action:
        case None:
            return ""
        case Accept():
            return "-j ACCEPT"
        case Drop():
            return "-j DROP"
        case Notrack():
            return "-j NOTRACK"
        case Reject(tcp_reset):
            return "-j REJECT --reject-with tcp-reset" if tcp_reset else "-j REJECT"
        case Return():
            return "-j RETURN"
        case Jump(chain):
            return f"-j {chain}"
        case Goto(chain):
            return f"-g {chain}"
        case SetMark(mask, value):
            return f"-j MARK --set-xmark {value:#x}/{mask:#x}"
        case SetDscp(value):
            return f"-j DSCP --set-dscp {_dscp(value)}"
        case Dnat(to):
            return f"-j DNAT --to-destination {to}"
        case Snat(to, ports):
            if ports is None:
                return f"-j SNAT --to-source {to}"
            return f"-j SNAT --to-source {to}:{ports[0]}-{ports[1]}"
        case Masquerade(ports):
            if ports is None:
                return "-j MASQUERADE"
            first, last = ports
            return f"-j MASQUERADE --to-ports {first}" + (f"-{last}" if last != first else "")
        case Log(prefix, level):
            return f'-j LOG --log-prefix "{prefix}" --log-level {level}'
        case Dispatch():
            raise ValueError("iptables has no verdict maps: dispatch is a tree of rules")


@dataclass(slots=True)
class _Rendering:
    """One model rule on its way out: the blocks before it and its own matches."""

    scratch: ScratchBits
    origin: Origin | None
    blocks: list[IptRule] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    protocol: str = ""  # the positive -p match, repeated in port alternatives
    inline: set[str] = field(default_factory=set)  # -s / -d already used

    def any_of(self, bit: int, alternatives: Iterable[str], *, negate: bool) -> None:
        """The block that marks any of ``alternatives``; the final rule then
        requires the mark (or, ``negate``, its absence)."""
        # Helpers belong to the rule they serve (origin), but count none of it.
        clear, mark = action_text(SetMark.off(bit)), action_text(SetMark.on(bit))
        self.blocks.append(IptRule("", clear, origin=self.origin))
        self.blocks.extend(IptRule(alt, mark, origin=self.origin) for alt in alternatives)
        self.parts.append(mark_match(MarkMatch.lacks(bit) if negate else MarkMatch.has(bit)))

    def addresses(self, term: Addresses) -> None:
        if not term.nets:
            raise ValueError("an address term with no networks matches nothing")
        flag = "-s" if term.side is Side.SRC else "-d"
        # iptables takes each of -s and -d once per rule ("multiple -d flags
        # not allowed"), so one network goes inline only while its flag is
        # free; anything else goes through a mark: one rule per network
        # marks a hit, and the final rule requires a hit (any of them) or,
        # negated, its absence (none of them). A Kubernetes ipBlock with an
        # except is the common case of both on one side.
        if len(term.nets) == 1 and flag not in self.inline:
            self.inline.add(flag)
            self.parts.append(f"{'! ' if term.negate else ''}{flag} {term.nets[0]}")
            return
        bit = self.scratch.take(f"{'not_' if term.negate else ''}{term.side.value}_net")
        self.any_of(bit, (f"{flag} {n}" for n in term.nets), negate=term.negate)

    def ports(self, term: Ports) -> None:
        opt = "--sports" if term.side is Side.SRC else "--dports"
        chunks = port_chunks(term.ranges)
        if term.negate:
            # None of them: each chunk and each set must fail, an AND.
            self.parts.extend(f"-m multiport ! {opt} {c}" for c in chunks)
            self.parts.extend(
                _set_match(n, term.side, SetKind.ADDRESS_PORTS, negate=True) for n in term.named
            )
            return
        alternatives = [f"-m multiport {opt} {c}" for c in chunks] + [
            _set_match(n, term.side, SetKind.ADDRESS_PORTS, negate=False) for n in term.named
        ]
        if not alternatives:
            raise ValueError("a port term with no ports or sets matches nothing")
        if len(alternatives) == 1:
            self.parts.append(alternatives[0])
            return
        bit = self.scratch.take(f"{term.side.value}_port")
        # multiport needs -p in each rule that uses it.
        alternatives = [f"{self.protocol} {alt}".strip() for alt in alternatives]
        self.any_of(bit, alternatives, negate=False)

    def term(self, term: Match) -> None:
        match term:
            case Protocol(name, negate):
                text = f"-p {_protocol(name)}"
                if negate:
                    self.parts.append(f"! {text}")
                else:
                    self.protocol = text
                    self.parts.append(text)
            case Addresses():
                self.addresses(term)
            case InSet(side, name, kind, negate):
                self.parts.append(_set_match(name, side, kind, negate=negate))
            case Ports():
                self.ports(term)
            case Port(side, port):
                self.parts.append(f"--{side.value[0]}port {port}")
            case LocalAddress(side, negate, out_interface):
                bang = "! " if negate else ""
                limit = " --limit-iface-out" if out_interface else ""
                self.parts.append(f"-m addrtype {bang}--{side.value}-type LOCAL{limit}")
            case Icmp(version, icmp, negate):
                bang = "! " if negate else ""
                if version == 4:
                    self.parts.append(f"-m icmp {bang}--icmp-type {icmp}")
                else:
                    self.parts.append(f"-m icmp6 {bang}--icmpv6-type {icmp}")
            case MarkMatch():
                self.parts.append(mark_match(term))
            case ConnState(states, negate):
                bang = "! " if negate else ""
                self.parts.append(f"-m conntrack {bang}--ctstate {','.join(states)}")
            case Interface(name, inbound, negate):
                bang = "! " if negate else ""
                self.parts.append(f"{bang}{'-i' if inbound else '-o'} {name}")
            case Limit(rate, burst):
                if not LIMIT_RATE.fullmatch(rate):
                    raise ValueError(f"not a rate limit: {rate!r}")
                burst_text = f" --limit-burst {burst}" if burst else ""
                self.parts.append(f"-m limit --limit {rate}{burst_text}")
            case ConnLimit(above):
                # Mask 0: every source counts together, the endpoint's total.
                self.parts.append(f"-m connlimit --connlimit-above {int(above)} --connlimit-mask 0")


@dataclass(frozen=True, slots=True)
class IptablesSerialiser:
    """Model rules to iptables rules; ``marks`` gives the scratch bits for ORs
    (a table whose rules never OR needs none)."""

    marks: Marks | None = None

    def rule(self, rule: TableRule) -> list[IptRule]:
        out = _Rendering(ScratchBits(self.marks), rule.origin)
        for term in rule.match:
            out.term(term)
        final = IptRule(
            " ".join(out.parts),
            action_text(rule.action),
            comment=rule.comment,
            origin=rule.origin,
            counts=rule.counts,
        )
        return [*out.blocks, final]

    def rules(self, rules: Iterable[TableRule]) -> tuple[IptRule, ...]:
        out: list[IptRule] = []
        for rule in rules:
            out.extend(self.rule(rule))
        return tuple(out)
