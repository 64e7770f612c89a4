"""DiffStore: desired values in, minimal changes out (after KPNG's diffstore).

Producers set the complete desired value of every key they know about;
the store compares with what was last committed and yields only what is
new, changed or gone. Values must compare by value (frozen dataclasses).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["Changes", "DiffStore"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Changes(Generic[K, V]):
    upserts: dict[K, V] = field(default_factory=dict)
    deletes: frozenset[K] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.upserts or self.deletes)


class DiffStore(Generic[K, V]):
    def __init__(self) -> None:
        self._committed: dict[K, V] = {}
        self._desired: dict[K, V] = {}
        self._touched: set[K] = set()

    def set(self, key: K, value: V) -> None:
        self._desired[key] = value
        self._touched.add(key)

    def delete(self, key: K) -> None:
        self._desired.pop(key, None)
        self._touched.add(key)

    def get(self, key: K) -> V | None:
        return self._desired.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._desired

    def keys(self) -> list[K]:
        return list(self._desired)

    def changes(self) -> Changes[K, V]:
        """What differs between desired and committed, for touched keys only."""
        upserts: dict[K, V] = {}
        deletes: set[K] = set()
        for key in self._touched:
            if key in self._desired:
                value = self._desired[key]
                if key not in self._committed or self._committed[key] != value:
                    upserts[key] = value
            elif key in self._committed:
                deletes.add(key)
        return Changes(upserts, frozenset(deletes))

    def commit(self) -> Changes[K, V]:
        """Return the changes and make desired the new committed state."""
        changes = self.changes()
        for key, value in changes.upserts.items():
            self._committed[key] = value
        for key in changes.deletes:
            del self._committed[key]
        self._touched.clear()
        return changes

    def touch_all(self) -> None:
        """Treat every key as possibly changed (a full resync)."""
        self._touched |= set(self._desired) | set(self._committed)
