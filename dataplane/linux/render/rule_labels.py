"""Which policy rule each rule of the filter table was rendered from.

The policy counters (:mod:`dataplane.ops.policy_counters`) read the
kernel's own per-rule counters with ``iptables-save -c`` (on nftables
``nft list table``) in the metrics server's thread; this is the map they
name them by, computed on the main loop after each apply and published
whole, never changed after:
``(IP version, chain) -> rule hash -> Origin``. Keyed by the rule's hash
comment (which covers the chain, the rule and every rule before it), a
counter is only ever attributed to exactly the rule we wrote: a chain the
kernel holds in another version (quarantined, or rewritten since) simply
matches nothing.

The labels are the rules' own origins (:class:`~dataplane.linux.rules.rule.Origin`),
set by the renderers on the one rule whose counter counts a policy rule's
packets (``counts``): a policy or profile rule's verdict, a tier's
end-of-tier drop, the final drop of what nothing allowed. Nothing is
parsed back from chain names or comments.

Incremental: the tables report which chains changed (an origin-only
change included), so an update costs in proportion to what changed, not
to what the node holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Protocol

from dataplane.linux.rules.rule import Origin

__all__ = ["Labelled", "RuleLabels", "RuleMap", "chain_labels"]

# (IP version, chain) -> rule hash -> the policy rule it counts for.
RuleMap = Mapping[tuple[int, str], Mapping[str, Origin]]


class _Counted(Protocol):
    """A backend's rule: where it came from, and whether it counts for it."""

    @property
    def counts(self) -> bool: ...

    @property
    def origin(self) -> Origin | None: ...


class Labelled(Protocol):
    """A filter table on either backend: an iptables ``Table``, or the
    ``filter`` view of our nftables table."""

    def take_changed(self) -> set[str]: ...

    def desired(self, name: str) -> tuple[Sequence[_Counted], Sequence[str]] | None: ...


def chain_labels(rules: Sequence[_Counted], hashes: Sequence[str]) -> dict[str, Origin]:
    """The origins of a chain's counting rules, by hash."""
    return {
        rule_hash: rule.origin
        for rule, rule_hash in zip(rules, hashes, strict=True)
        if rule.counts and rule.origin is not None
    }


class RuleLabels:
    """Keeps the :data:`RuleMap` of the filter tables, updated after each apply."""

    def __init__(self) -> None:
        self._labels: dict[tuple[int, str], Mapping[str, Origin]] = {}
        self.published: RuleMap = MappingProxyType({})

    def update(self, tables: Mapping[int, Labelled]) -> RuleMap:
        """Label what changed in the filter ``tables`` (by IP version); the new map."""
        dirty = False
        for version, table in tables.items():
            for chain in table.take_changed():
                desired = table.desired(chain)
                labels = chain_labels(*desired) if desired is not None else None
                if labels:
                    self._labels[(version, chain)] = MappingProxyType(labels)
                    dirty = True
                elif self._labels.pop((version, chain), None) is not None:
                    dirty = True
        if dirty:
            self.published = MappingProxyType(dict(self._labels))
        return self.published
