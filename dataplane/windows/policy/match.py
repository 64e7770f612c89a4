"""One Calico rule's match as HNS can say it: a disjunction of conjunctive branches.

An HNS ACL matches a set of protocols, and on each side (source,
destination) any of a list of addresses and any of a list of ports. A Calico
rule says more: several IP sets that must all match, negated CIDRs, sets,
ports and protocols, named ports (address, protocol and port together),
port ranges OR named ports. :func:`compile_rule` turns each rule into
:class:`Branch` values -- the rule matches a packet exactly when one of its
branches does -- by exact arithmetic: negations become complements, set
intersections are computed, named ports split into one branch per
(protocol, port).

What has no exact form (an ICMP type or code, a negated named port, a
negation whose complement would be too long to send) is reported in
:attr:`Compiled.inexact`. With ``widen`` the compiler drops those
constraints, giving a superset of the rule's packets: the only safe way to
render a deny. An allow that is inexact is never rendered (the caller's
job); both are how the Windows platform fails closed.

Semantics are the reference evaluator's (Felix's), see
``tests/reference_eval.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from dataplane.model import IPSet, PortRange, Rule, protocol_number
from dataplane.windows.policy.addresses import AddressSet

__all__ = [
    "ALL_PROTOCOLS",
    "PORT_PROTOCOLS",
    "Branch",
    "Compiled",
    "SetView",
    "Side",
    "compile_rule",
]

Ports = tuple[tuple[int, int], ...]
ALL_PROTOCOLS = frozenset(range(256))
PORT_PROTOCOLS = frozenset({6, 17, 132, 136})  # tcp, udp, sctp, udplite
_ALL_PORTS: Ports = ((0, 65535),)
# A negation is rendered as its complement only while that stays this short
# (a few ACL chunks); beyond it the negation is inexact.
NEGATION_LIMIT = 8_000


@dataclass(frozen=True, slots=True)
class Side:
    """What a branch matches on one side (source or destination) of a packet.

    ``addresses`` None is any address; ``token`` names a ``SetPolicy`` that
    holds exactly ``addresses`` (rendered instead of the list); ``ports``
    None is any port.
    """

    addresses: AddressSet | None = None
    token: str | None = None
    ports: Ports | None = None

    def __and__(self, other: Side) -> Side | None:
        """Packets both sides match; None if there are none."""
        addresses, token = self.addresses, self.token
        if other.addresses is not None:
            if addresses is None:
                addresses, token = other.addresses, other.token
            elif addresses.version != other.addresses.version:
                return None
            else:
                same = addresses == other.addresses and token == other.token
                addresses = addresses.intersection(other.addresses)
                token = token if same else None
                if not addresses:
                    return None
        ports = self.ports
        if other.ports is not None:
            ports = other.ports if ports is None else _port_intersection(ports, other.ports)
            if not ports:
                return None
        return Side(addresses, token, ports)

    @property
    def version(self) -> int | None:
        return None if self.addresses is None else self.addresses.version


@dataclass(frozen=True, slots=True)
class Branch:
    """One conjunction: protocols (None: any), source side, destination side."""

    protocols: frozenset[int] | None
    src: Side
    dst: Side

    def __and__(self, other: Branch) -> Branch | None:
        """Packets both branches match; None if there are none."""
        src, dst = self.src & other.src, self.dst & other.dst
        if src is None or dst is None:
            return None
        protocols = self.protocols
        if other.protocols is not None:
            protocols = other.protocols if protocols is None else protocols & other.protocols
        return _branch(protocols, src, dst)


ANY = Branch(None, Side(), Side())


def _branch(protocols: frozenset[int] | None, src: Side, dst: Side) -> Branch | None:
    """The branch, normalised; None if no packet can match it."""
    if src.version and dst.version and src.version != dst.version:
        return None
    if src.ports is not None or dst.ports is not None:
        # A port constraint only ever matches packets that have ports.
        protocols = PORT_PROTOCOLS if protocols is None else protocols & PORT_PROTOCOLS
    if protocols is not None and not protocols:
        return None
    return Branch(protocols, src, dst)


def _port_intersection(a: Ports, b: Ports) -> Ports:
    out = []
    for a_first, a_last in a:
        for b_first, b_last in b:
            first, last = max(a_first, b_first), min(a_last, b_last)
            if first <= last:
                out.append((first, last))
    return _merged_ports(out)


def _merged_ports(ranges: Iterable[tuple[int, int]]) -> Ports:
    out: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(last, out[-1][1]))
        else:
            out.append((first, last))
    return tuple(out)


def _port_complement(ranges: Ports) -> Ports:
    out, start = [], 0
    for first, last in _merged_ports(ranges):
        if first > start:
            out.append((start, first - 1))
        start = last + 1
    if start <= 65535:
        out.append((start, 65535))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Compiled:
    branches: tuple[Branch, ...]
    inexact: tuple[str, ...] = ()  # what HNS could not say exactly, for the report


class SetView:
    """The IP sets rules may name, each parsed once per render pass.

    A set named by many rules (or by one rule on many endpoints) is turned
    into address sets once; the view must not outlive the sets it reads.
    """

    def __init__(
        self, sets: Mapping[str, IPSet], token: Callable[[str], str | None] = lambda _: None
    ) -> None:
        self.sets = sets
        self.token = token  # the SetPolicy id standing for a set, where sets are objects
        self._addresses: dict[tuple[str, int], AddressSet] = {}
        self._named: dict[tuple[str, int], dict[tuple[int, int], AddressSet]] = {}

    def addresses(self, set_id: str, version: int) -> AddressSet:
        found = self._addresses.get((set_id, version))
        if found is None:
            ipset = self.sets.get(set_id)  # a set we never got is empty, as in Felix
            members = () if ipset is None else (m for m in ipset.members if "," not in m)
            found = self._addresses[(set_id, version)] = AddressSet.of(version, members)
        return found

    def named_ports(self, set_id: str, version: int) -> dict[tuple[int, int], AddressSet]:
        """Members ``ip,proto:port`` grouped by (protocol, port)."""
        found = self._named.get((set_id, version))
        if found is not None:
            return found
        ipset = self.sets.get(set_id)
        groups: dict[tuple[int, int], list[str]] = {}
        for member in () if ipset is None else ipset.members:
            address, comma, proto_port = member.rpartition(",")
            if comma:
                proto, _, port = proto_port.partition(":")
                groups.setdefault((protocol_number(proto), int(port)), []).append(address)
        found = self._named[(set_id, version)] = {}
        for key, addresses in groups.items():
            group = AddressSet.of(version, addresses)
            if group:
                found[key] = group
        return found


def _on(side: str, match: Side, protocols: frozenset[int] | None = None) -> Branch:
    """A branch that constrains only ``side`` ("source" or "destination")."""
    if side == "source":
        return Branch(protocols, match, Side())
    return Branch(protocols, Side(), match)


def _and_all(groups: Iterable[list[Branch]]) -> list[Branch]:
    """Every satisfiable conjunction taking one branch from each group."""
    out = [ANY]
    for group in groups:
        out = [c for a in out for b in group if (c := a & b) is not None]
    return out


class _Compiler:
    def __init__(self, rule: Rule, view: SetView, widen: bool) -> None:
        self.rule = rule
        self.view = view
        self.widen = widen
        self.inexact: list[str] = []

    def _drop(self, what: str) -> bool:
        """Note that ``what`` is inexact; True if the constraint is dropped (widening)."""
        if what not in self.inexact:
            self.inexact.append(what)
        return self.widen

    def protocols(self) -> list[Branch]:
        rule = self.rule
        protocols = None if rule.protocol is None else frozenset({protocol_number(rule.protocol)})
        if rule.not_protocol is not None:
            protocols = (protocols or ALL_PROTOCOLS) - {protocol_number(rule.not_protocol)}
        if (rule.icmp is not None or rule.not_icmp is not None) and not self._drop(
            "ICMP type/code"
        ):
            return []
        return [b] if (b := _branch(protocols, Side(), Side())) is not None else []

    def addresses(self, side: str, version: int) -> list[Branch]:
        """One side's address match in ``version``: all of it positive, none of it negated."""
        nets, sets, not_nets, not_sets = _address_fields(self.rule, side)
        found: AddressSet | None = AddressSet.of(version, nets) if nets else None
        for set_id in sets:
            members = self.view.addresses(set_id, version)
            found = members if found is None else found.intersection(members)
        token = self.view.token(sets[0]) if len(sets) == 1 and not nets else None
        if not_nets or not_sets:
            cut = AddressSet.of(version, not_nets)
            for set_id in not_sets:
                cut = cut.union(self.view.addresses(set_id, version))
            rest = (AddressSet.everything(version) if found is None else found).difference(cut)
            if rest.cidr_count_at_most(NEGATION_LIMIT):
                found, token = rest, None
            elif not self._drop(f"negated {side} addresses (complement too long)"):
                return []
        if found is not None and not found:
            return []
        return [_on(side, Side(found, token))]

    def ports(self, side: str, version: int) -> list[Branch]:
        """One side's port match: any range OR any named port, and none of the negated."""
        ranges, named, not_ranges, not_named = _port_fields(self.rule, side)
        choices: list[Branch] = []
        if ranges or named:
            if ranges:
                choices.append(_on(side, Side(ports=_merged_ports(ranges))))
            for set_id in named:
                for (proto, port), found in self.view.named_ports(set_id, version).items():
                    choices.append(
                        _on(side, Side(found, None, ((port, port),)), frozenset({proto}))
                    )
        else:
            choices.append(ANY)
        if not_ranges:
            # A packet without ports always satisfies a negated port match.
            negated = [
                _on(side, Side(ports=_port_complement(not_ranges))),
                Branch(ALL_PROTOCOLS - PORT_PROTOCOLS, Side(), Side()),
            ]
            choices = _and_all([choices, negated])
        if not_named and not self._drop(f"negated named {side} ports"):
            return []
        return choices

    def ip_port_sets(self, version: int) -> list[list[Branch]]:
        """Each destination (address, protocol, port) set: one group that must match."""
        return [
            [
                _on("destination", Side(found, None, ((port, port),)), frozenset({proto}))
                for (proto, port), found in self.view.named_ports(set_id, version).items()
            ]
            for set_id in self.rule.dst_ip_port_set_ids
        ]

    def version_branches(self, version: int) -> list[Branch]:
        r = self.rule
        groups = [
            self.protocols(),
            self.addresses("source", version),
            self.addresses("destination", version),
            self.ports("source", version),
            self.ports("destination", version),
            *self.ip_port_sets(version),
        ]
        if r.ip_version is not None:
            # Pin the family even when no address is constrained.
            groups.append([_on("source", Side(AddressSet.everything(version)))])
        return _and_all(groups)


def _ranges(ports: Iterable[PortRange]) -> Ports:
    return tuple((p.first, p.last) for p in ports)


def _address_fields(
    rule: Rule, side: str
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(nets, sets, negated nets, negated sets) of the rule's ``side``."""
    if side == "source":
        return rule.src_nets, rule.src_ip_set_ids, rule.not_src_nets, rule.not_src_ip_set_ids
    return rule.dst_nets, rule.dst_ip_set_ids, rule.not_dst_nets, rule.not_dst_ip_set_ids


def _port_fields(rule: Rule, side: str) -> tuple[Ports, tuple[str, ...], Ports, tuple[str, ...]]:
    """(ranges, named-port sets, negated ranges, negated named-port sets) of ``side``."""
    if side == "source":
        return (
            _ranges(rule.src_ports),
            rule.src_named_port_ip_set_ids,
            _ranges(rule.not_src_ports),
            rule.not_src_named_port_ip_set_ids,
        )
    return (
        _ranges(rule.dst_ports),
        rule.dst_named_port_ip_set_ids,
        _ranges(rule.not_dst_ports),
        rule.not_dst_named_port_ip_set_ids,
    )


def _needs_family(rule: Rule) -> bool:
    """Does the rule say anything about addresses (so each family is its own branch)?"""
    return bool(
        rule.ip_version is not None
        or rule.ip_set_ids()
        or rule.src_nets
        or rule.dst_nets
        or rule.not_src_nets
        or rule.not_dst_nets
    )


def compile_rule(
    rule: Rule,
    sets: SetView,
    versions: tuple[int, ...],
    *,
    widen: bool = False,
) -> Compiled:
    """``rule``'s match as branches over the host's IP ``versions``.

    ``sets.token`` gives the ``SetPolicy`` id standing for a set where the
    host keeps sets as objects (None: expand its members). With ``widen``,
    inexact constraints are dropped (a superset of the rule's packets);
    without, a rule with one matches only what the exact part of it can say
    and the caller must not render it as an allow.
    """
    compiler = _Compiler(rule, sets, widen)
    if rule.ip_version is not None:
        versions = tuple(v for v in versions if v == rule.ip_version)
    families = versions if _needs_family(rule) else versions[:1]
    found: list[Branch] = []
    for version in families:
        for branch in compiler.version_branches(version):
            if branch not in found:
                found.append(branch)
    return Compiled(tuple(found), tuple(compiler.inexact))
