"""Numbered writes: a read taken beside them never takes back a later write.

The refreshes read the kernel while applies go on writing. Each write is
numbered and remembers what it touched; a read notes the number before it
starts, and when its answer comes every key a later write touched keeps
what that write left there (the read may predate it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from typing import Generic, TypeVar

__all__ = ["ReadsBesideApplies", "Writes"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")


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


class ReadsBesideApplies(Generic[T]):
    """A refresh's read is taken in between applies, never during one.

    An apply reckons what to write, awaits the kernel, then records what it
    wrote; a read taken in between those would be overwritten by that
    record, and what it found lost. So a read that comes back while an
    apply is under way waits for the apply's end.
    """

    def __init__(self, take: Callable[[T], bool]) -> None:
        self._take = take  # takes a read in; True if something differs
        self._applying = False
        self._waiting: T | None = None

    def offer(self, read: T) -> bool:
        """Take ``read`` in now, or after the apply under way (then True:
        what it holds is not known yet, so another apply is wanted)."""
        if self._applying:
            self._waiting = read
            return True
        return self._take(read)

    async def apply(self, apply: Callable[[], Awaitable[bool]]) -> bool:
        """Run ``apply``; a read offered meanwhile is taken in at its end."""
        self._applying = True
        try:
            return await apply()
        finally:
            self._applying = False
            waiting, self._waiting = self._waiting, None
            if waiting is not None:
                self._take(waiting)
