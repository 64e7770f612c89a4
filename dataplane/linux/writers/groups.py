"""ChainGroups: chains rendered as one unit, so a re-render drops stale ones."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from dataplane.linux.rules.chain import Chain
from dataplane.linux.writers.shapes import RuleTable

__all__ = ["ChainGroups"]

R = TypeVar("R")


class ChainGroups:
    def __init__(self) -> None:
        self._members: dict[tuple[str, int, str], frozenset[str]] = {}

    def set(self, table: RuleTable[R], group: str, chains: Iterable[Chain[R]]) -> None:
        """Make ``group`` in ``table`` exactly ``chains``, removing its stale ones."""
        key = (table.name, table.version, group)
        chains = list(chains)
        names = frozenset(c.name for c in chains)
        for stale in self._members.get(key, frozenset()) - names:
            table.remove_chain(stale)
        for chain in chains:
            table.update_chain(chain)
        if names:
            self._members[key] = names
        else:
            self._members.pop(key, None)

    def group_of(self, table: str, version: int, chain: str) -> str | None:
        """The group ``chain`` belongs to in ``table`` (a linear scan: reports only)."""
        for (t, v, group), members in self._members.items():
            if (t, v) == (table, version) and chain in members:
                return group
        return None
