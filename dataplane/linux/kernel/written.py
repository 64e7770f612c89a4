"""Numbered writes: a read taken beside them never takes back a later write.

The refreshes read the kernel while applies go on writing. Each write is
numbered and remembers what it touched; a read notes the number before it
starts, and when its answer comes every key a later write touched keeps
what that write left there (the read may predate it).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Generic, TypeVar

__all__ = ["Writes"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Writes(Generic[K]):
    """The writes of one programmer, by number, and which touched each key."""

    def __init__(self) -> None:
        self.count = 0  # writes so far
        self._by: dict[K, int] = {}

    def wrote(self, keys: Iterable[K] = ()) -> None:
        """One more write landed; it touched ``keys``."""
        self.count += 1
        self.touched(keys)

    def touched(self, keys: Iterable[K]) -> None:
        """The last write also touched ``keys``."""
        for key in keys:
            self._by[key] = self.count

    def merge(self, cache: dict[K, V], read: Mapping[K, V], began: int) -> set[K]:
        """Take a read that began when ``count`` was ``began`` into ``cache``
        (what a key holds; absent: nothing); the keys whose value changed."""
        changed: set[K] = set()
        for key in cache.keys() | read.keys():
            if self._by.get(key, 0) > began:
                continue
            if key not in read:
                if key in cache:
                    del cache[key]
                    changed.add(key)
            elif key not in cache or cache[key] != read[key]:
                cache[key] = read[key]
                changed.add(key)
        return changed

    def settled(self, began: int) -> None:
        """Forget the writes up to ``began``: only reads that begin after
        now ask about them (keys such as chain names come and go with
        pods, so what is remembered must not grow)."""
        self._by = {k: w for k, w in self._by.items() if w > began}
