"""Rule renderer: one model :class:`~dataplane.model.Rule` -> iptables rules.

Pure: model values in, :class:`IptRule` values out, for one IP version.

Semantics (Felix's):

* Match fields AND together; the values *within* a positive field OR
  (any of the source CIDRs, any port or named port); the values within a
  negated field must all fail (not in any of the CIDRs).
* IP set fields are ANDed set by set, as Felix sends them.
* A rule that cannot match in this IP version (``ip_version``, only
  other-family CIDRs, ICMP of the other family) renders to nothing.
* An IP set the platform does not have is an empty set: a positive match
  on it can never succeed (the rule renders to nothing) and a negated one
  always does (the condition is left out). Felix never sends such rules;
  this keeps a misordered stream from wedging every apply.
* Where one iptables rule cannot express an OR (several CIDRs, ports plus
  named-port sets, more than 15 multiport entries), a short block of rules
  sets a scratch mark bit first and the final rule requires it.
* allow / pass set the accept / pass mark and RETURN; deny DROPs; log LOGs
  and falls through.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dataplane.linux.iptables.chains import IptRule
from dataplane.linux.render.marks import Marks, clear_mark, has_mark, lacks_mark, set_mark
from dataplane.model import Action, IcmpMatch, PortRange, Rule

__all__ = ["RuleRenderer", "is_whole_family", "verdict_index"]

_MULTIPORT_MAX = 15  # entries per -m multiport; a range counts as two


def _family(net: str) -> int:
    return 6 if ":" in net else 4


def is_whole_family(net: str) -> bool:
    """A /0: every address of its family (nft refuses it negated, at commit)."""
    return ipaddress.ip_network(net, strict=False).prefixlen == 0


def _port_chunks(ports: Sequence[PortRange]) -> list[str]:
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


@dataclass(frozen=True, slots=True)
class RuleRenderer:
    """Renders rules for one IP version.

    Args:
        version: 4 or 6.
        marks: mark bits in use.
        ipset_name: maps an IP set id to the kernel set name for ``version``,
            or None if there is no such set.
        log_prefix: prefix of LOG actions (Felix's ``LogPrefix``).
    """

    version: int
    marks: Marks
    ipset_name: Callable[[str, int], str | None]
    log_prefix: str = "calico-packet"

    def _proto(self, name: str) -> str:
        if name == "icmpv6":
            return "ipv6-icmp"
        return name

    def _applies(self, rule: Rule) -> bool:
        if rule.ip_version and rule.ip_version != self.version:
            return False
        if rule.protocol == ("icmpv6" if self.version == 4 else "icmp"):
            return False
        for nets in (rule.src_nets, rule.dst_nets):
            if nets and not any(_family(n) == self.version for n in nets):
                return False
        return not (rule.protocol and rule.not_protocol == rule.protocol)

    def render(self, rule: Rule) -> list[IptRule]:
        if not self._applies(rule):
            return []
        v = self.version
        blocks: list[IptRule] = []
        match: list[str] = []
        proto_match = ""
        if rule.protocol:
            proto_match = f"-p {self._proto(rule.protocol)}"
            match.append(proto_match)
        elif rule.not_protocol and rule.not_protocol != ("icmpv6" if v == 4 else "icmp"):
            # (negating the other family's ICMP is vacuous, so it is left out)
            match.append(f"! -p {self._proto(rule.not_protocol)}")

        def nets(values: tuple[str, ...]) -> list[str]:
            return [n for n in values if _family(n) == v]

        m = self.marks
        for flag, wanted, unwanted, any_bit, none_bit in (
            ("-s", nets(rule.src_nets), nets(rule.not_src_nets), m.src_net, m.not_src_net),
            ("-d", nets(rule.dst_nets), nets(rule.not_dst_nets), m.dst_net, m.not_dst_net),
        ):
            # A /0 is every address of the family: wanted, the field holds
            # for every packet; unwanted, for none, so the rule never
            # matches. (nft also refuses "! -s 0.0.0.0/0" at commit with
            # EINVAL, though --test passes it.)
            if any(is_whole_family(n) for n in unwanted):
                return []
            if any(is_whole_family(n) for n in wanted):
                wanted.clear()
            # iptables takes each of -s and -d once per rule ("multiple -d
            # flags not allowed"), so a single CIDR goes inline only while
            # the flag is still free; everything else goes through a mark:
            # one rule per CIDR marks a hit, the final rule requires a hit
            # (any of them) or, negated, its absence (none of them). An
            # ipBlock with an except is the common case of both at once.
            inline = len(wanted) == 1
            if inline:
                match.append(f"{flag} {wanted[0]}")
            elif wanted:
                blocks.extend(self._mark_any(flag, wanted, any_bit))
                match.append(has_mark(any_bit))
            if len(unwanted) == 1 and not inline:
                match.append(f"! {flag} {unwanted[0]}")
            elif unwanted:
                blocks.extend(self._mark_any(flag, unwanted, none_bit))
                match.append(lacks_mark(none_bit))

        def names(ids: tuple[str, ...]) -> list[str] | None:
            """Kernel names; None if a set is missing (empty: no match possible)."""
            found = [self.ipset_name(s, v) for s in ids]
            return None if None in found else [n for n in found if n is not None]

        def present(ids: tuple[str, ...]) -> list[str]:
            return [n for n in (self.ipset_name(s, v) for s in ids) if n is not None]

        positive = [
            (names(rule.src_ip_set_ids), "src"),
            (names(rule.dst_ip_set_ids), "dst"),
            (names(rule.dst_ip_port_set_ids), "dst,dst"),
        ]
        for found, direction in positive:
            if found is None:
                return []
            match.extend(f"-m set --match-set {n} {direction}" for n in found)
        match.extend(f"-m set ! --match-set {n} src" for n in present(rule.not_src_ip_set_ids))
        match.extend(f"-m set ! --match-set {n} dst" for n in present(rule.not_dst_ip_set_ids))

        for ports, named, opt, direction, bit in (
            (rule.src_ports, rule.src_named_port_ip_set_ids, "--sports", "src,src", m.src_port),
            (rule.dst_ports, rule.dst_named_port_ip_set_ids, "--dports", "dst,dst", m.dst_port),
        ):
            chunks = _port_chunks(ports)
            alternatives = [f"-m multiport {opt} {c}" for c in chunks] + [
                f"-m set --match-set {n} {direction}" for n in present(named)
            ]
            if (ports or named) and not alternatives:
                return []  # only named ports, all of them empty sets
            if len(alternatives) == 1:
                match.append(alternatives[0])
            elif alternatives:
                blocks.append(IptRule("", clear_mark(bit)))
                blocks.extend(
                    IptRule(f"{proto_match} {alt}".strip(), set_mark(bit)) for alt in alternatives
                )
                match.append(has_mark(bit))
        for ports, named, opt, direction in (
            (rule.not_src_ports, rule.not_src_named_port_ip_set_ids, "--sports", "src,src"),
            (rule.not_dst_ports, rule.not_dst_named_port_ip_set_ids, "--dports", "dst,dst"),
        ):
            match.extend(f"-m multiport ! {opt} {c}" for c in _port_chunks(ports))
            match.extend(f"-m set ! --match-set {n} {direction}" for n in present(named))

        if rule.icmp:
            match.append(self._icmp(rule.icmp, negate=False))
        if rule.not_icmp:
            match.append(self._icmp(rule.not_icmp, negate=True))
        return blocks + self._action(rule.action, " ".join(match))

    @staticmethod
    def _mark_any(flag: str, nets: Sequence[str], bit: int) -> list[IptRule]:
        """Rules that set ``bit`` on a packet whose ``flag`` address is in any of ``nets``."""
        return [
            IptRule("", clear_mark(bit)),
            *(IptRule(f"{flag} {n}", set_mark(bit)) for n in nets),
        ]

    def _icmp(self, icmp: IcmpMatch, *, negate: bool) -> str:
        bang = "! " if negate else ""
        if self.version == 4:
            return f"-m icmp {bang}--icmp-type {icmp}"
        return f"-m icmp6 {bang}--icmpv6-type {icmp}"

    def _action(self, action: Action, match: str) -> list[IptRule]:
        # The rule that carries the verdict comes first; keep verdict_index in step.
        m = self.marks
        if action is Action.ALLOW:
            return [IptRule(match, set_mark(m.accept)), IptRule(has_mark(m.accept), "-j RETURN")]
        if action is Action.PASS:
            return [IptRule(match, set_mark(m.pass_)), IptRule(has_mark(m.pass_), "-j RETURN")]
        if action is Action.DENY:
            return [IptRule(match, "-j DROP")]
        return [IptRule(match, f'-j LOG --log-prefix "{self.log_prefix}: " --log-level 5')]

    def render_all(self, rules: Sequence[Rule]) -> tuple[IptRule, ...]:
        out: list[IptRule] = []
        for rule in rules:
            out.extend(self.render(rule))
        return tuple(out)


def verdict_index(action: Action, rendered: Sequence[IptRule]) -> int:
    """Index in ``rendered`` (one rule's non-empty rendering) of the rule whose
    match is the model rule's: the one that DROPs, LOGs or sets the accept or
    pass mark. Its packet counter counts the packets the model rule matched;
    the mark blocks before it see every packet that reaches the rule, and the
    RETURN after an accept or pass mark counts the same packets again.
    """
    return len(rendered) - (2 if action in (Action.ALLOW, Action.PASS) else 1)
