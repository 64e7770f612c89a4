"""Rule renderer: one model :class:`~dataplane.model.Rule` -> model table rules.

Pure: policy rules in, :class:`~dataplane.linux.rules.rule.TableRule`
values out, for one IP version. The semantics live here once; how a
backend spells them (iptables' mark blocks for ORs, multiport chunks) is
the serialiser's business.

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
* A named-port or service set (address, protocol, port; TCP, UDP, SCTP)
  never matches a packet of another protocol.
* allow / pass set the accept / pass mark and RETURN; deny DROPs; log LOGs
  and falls through. The rule that carries the verdict counts the model
  rule's packets and carries its origin.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dataplane.linux.rules.action import Action as TableAction
from dataplane.linux.rules.action import Drop, Log, Return, SetMark
from dataplane.linux.rules.marks import Marks
from dataplane.linux.rules.match import (
    Addresses,
    Icmp,
    InSet,
    Limit,
    MarkMatch,
    Match,
    Ports,
    Protocol,
    SetKind,
    Side,
)
from dataplane.linux.rules.rule import Origin, TableRule
from dataplane.model import Action, Rule

__all__ = ["RuleRenderer", "is_whole_family"]

_PORT_PROTOCOLS = ("tcp", "udp", "sctp")


def _family(net: str) -> int:
    return 6 if ":" in net else 4


def is_whole_family(net: str) -> bool:
    """A /0: every address of its family (nft refuses it negated, at commit)."""
    return ipaddress.ip_network(net, strict=False).prefixlen == 0


@dataclass(frozen=True, slots=True)
class RuleRenderer:
    """Renders rules for one IP version.

    Args:
        version: 4 or 6.
        marks: mark bits in use.
        ipset_name: maps an IP set id to the kernel set name for ``version``,
            or None if there is no such set.
        log_prefix: prefix of LOG actions (Felix's ``LogPrefix``).
        log_limit: how often a Log rule may log (``LogActionRateLimit``), if at all limited.
    """

    version: int
    marks: Marks
    ipset_name: Callable[[str, int], str | None]
    log_prefix: str = "calico-packet"
    # Felix's LogActionRateLimit and its burst: Log rules log at most this often.
    log_limit: Limit | None = None

    def _applies(self, rule: Rule) -> bool:
        if rule.ip_version and rule.ip_version != self.version:
            return False
        if rule.protocol == ("icmpv6" if self.version == 4 else "icmp"):
            return False
        for nets in (rule.src_nets, rule.dst_nets):
            if nets and not any(_family(n) == self.version for n in nets):
                return False
        return not (rule.protocol and rule.not_protocol == rule.protocol)

    def matches(self, rule: Rule) -> list[Match] | None:
        """The terms of ``rule`` in this IP version; None if it can never match."""
        if not self._applies(rule):
            return None
        v = self.version
        terms: list[Match] = []
        if rule.protocol:
            terms.append(Protocol(rule.protocol))
        elif rule.not_protocol and rule.not_protocol != ("icmpv6" if v == 4 else "icmp"):
            # (negating the other family's ICMP is vacuous, so it is left out)
            terms.append(Protocol(rule.not_protocol, negate=True))

        for side, wanted_nets, unwanted_nets in (
            (Side.SRC, rule.src_nets, rule.not_src_nets),
            (Side.DST, rule.dst_nets, rule.not_dst_nets),
        ):
            wanted = tuple(n for n in wanted_nets if _family(n) == v)
            unwanted = tuple(n for n in unwanted_nets if _family(n) == v)
            # A /0 is every address of the family: wanted, the field holds
            # for every packet; unwanted, for none, so the rule never
            # matches. (nft also refuses "! -s 0.0.0.0/0" at commit with
            # EINVAL, though --test passes it.)
            if any(is_whole_family(n) for n in unwanted):
                return None
            if any(is_whole_family(n) for n in wanted):
                wanted = ()
            if wanted:
                terms.append(Addresses(side, wanted))
            if unwanted:
                terms.append(Addresses(side, unwanted, negate=True))

        if rule.protocol and rule.protocol not in _PORT_PROTOCOLS:
            # Named-port and service sets hold (address, protocol, port)
            # for TCP, UDP and SCTP only: with another protocol a lookup in
            # one never matches, and negated always holds. (nft also fails
            # to list a port lookup after, say, "meta l4proto 47".)
            if rule.src_named_port_ip_set_ids or rule.dst_named_port_ip_set_ids:
                return None
            if rule.dst_ip_port_set_ids:
                return None
            rule = dataclasses.replace(
                rule, not_src_named_port_ip_set_ids=(), not_dst_named_port_ip_set_ids=()
            )

        def names(ids: tuple[str, ...]) -> list[str] | None:
            """Kernel names; None if a set is missing (empty: no match possible)."""
            found = [self.ipset_name(s, v) for s in ids]
            return None if None in found else [n for n in found if n is not None]

        def present(ids: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(n for n in (self.ipset_name(s, v) for s in ids) if n is not None)

        for ids, side, kind in (
            (rule.src_ip_set_ids, Side.SRC, SetKind.ADDRESSES),
            (rule.dst_ip_set_ids, Side.DST, SetKind.ADDRESSES),
            (rule.dst_ip_port_set_ids, Side.DST, SetKind.ADDRESS_PORTS),
        ):
            found = names(ids)
            if found is None:
                return None
            terms.extend(InSet(side, n, kind) for n in found)
        for ids, side in ((rule.not_src_ip_set_ids, Side.SRC), (rule.not_dst_ip_set_ids, Side.DST)):
            terms.extend(InSet(side, n, negate=True) for n in present(ids))

        for ranges, named_ids, side in (
            (rule.src_ports, rule.src_named_port_ip_set_ids, Side.SRC),
            (rule.dst_ports, rule.dst_named_port_ip_set_ids, Side.DST),
        ):
            named = present(named_ids)
            if (ranges or named_ids) and not (ranges or named):
                return None  # only named ports, all of them empty sets
            if ranges or named:
                terms.append(Ports(side, ranges, named))
        for ranges, named_ids, side in (
            (rule.not_src_ports, rule.not_src_named_port_ip_set_ids, Side.SRC),
            (rule.not_dst_ports, rule.not_dst_named_port_ip_set_ids, Side.DST),
        ):
            named = present(named_ids)
            if ranges or named:
                terms.append(Ports(side, ranges, named, negate=True))

        if rule.icmp:
            terms.append(Icmp(v, rule.icmp))
        if rule.not_icmp:
            terms.append(Icmp(v, rule.not_icmp, negate=True))
        return terms

    def render(self, rule: Rule, origin: Origin | None = None) -> list[TableRule]:
        """``rule`` as table rules; none if it can never match in this IP version."""
        terms = self.matches(rule)
        if terms is None:
            return []
        m = self.marks
        verdict: TableAction
        if rule.action is Action.ALLOW:
            verdict, returns = SetMark.on(m.accept), m.accept
        elif rule.action is Action.PASS:
            verdict, returns = SetMark.on(m.pass_), m.pass_
        elif rule.action is Action.DENY:
            verdict, returns = Drop(), 0
        else:
            verdict, returns = Log(f"{self.log_prefix}: "), 0
            if self.log_limit is not None:
                terms = [*terms, self.log_limit]
        out = [TableRule(tuple(terms), verdict, origin=origin, counts=True)]
        if returns:
            out.append(TableRule((MarkMatch.has(returns),), Return(), origin=origin))
        return out

    def render_all(
        self, rules: Sequence[Rule], tier: str = "", owner: str = "", direction: str = ""
    ) -> tuple[TableRule, ...]:
        """Every rule of one policy or profile direction, each with its origin."""
        out: list[TableRule] = []
        for index, rule in enumerate(rules):
            origin = Origin(tier, owner, direction, str(index), rule.action.value)
            out.extend(self.render(rule, origin))
        return tuple(out)
