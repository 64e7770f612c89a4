"""A set's kernel items as the sets programmer keeps them, and what
changed since it last handed them out.

The plan of a set compares its items with what the kernel holds: every
item hashed and looked up for "equal?", "what goes?" and "what comes?",
30 ms at 100,000 items for a change of two. The frozenset the plan hands
out is the very value it records as held once the write lands. So while
the kernel's copy is still that object (no write refused since, no read
back that differed, no resync), what differs is exactly what was added
and removed since, kept here as it happens; identity of a frozenset
implies its value, so the shortcut can never disagree with the whole
comparison (``tests/linux/test_nft_sets.py`` holds it to that).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

__all__ = ["Delta", "KeptItems"]

# (items to add, items to delete)
Delta = tuple[frozenset[bytes], frozenset[bytes]]
_NOTHING: Delta = (frozenset(), frozenset())


class KeptItems:
    """A set's items, and the net change since :meth:`against` last ran."""

    __slots__ = ("_added", "_base", "_items", "_removed")

    def __init__(self, items: Iterable[bytes]) -> None:
        self._items = set(items)
        # The items last handed out; None before the first time (nothing
        # to be relative to, so no change is recorded).
        self._base: frozenset[bytes] | None = None
        self._added: set[bytes] = set()
        self._removed: set[bytes] = set()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._items)

    def __contains__(self, item: object) -> bool:
        return item in self._items

    def add(self, item: bytes) -> None:
        if item in self._items:
            return
        self._items.add(item)
        if self._base is None:
            return
        if item in self._removed:
            self._removed.discard(item)
        else:
            self._added.add(item)

    def discard(self, item: bytes) -> None:
        if item not in self._items:
            return
        self._items.discard(item)
        if self._base is None:
            return
        if item in self._added:
            self._added.discard(item)
        else:
            self._removed.add(item)

    def against(self, have: frozenset[bytes]) -> tuple[frozenset[bytes], Delta | None]:
        """The items now, frozen, and what they add to and delete from
        ``have``: None when only a whole comparison can tell (``have`` is
        not what the last call returned). Resets the record of changes."""
        if have is self._base:
            if not self._added and not self._removed:
                return have, _NOTHING  # the same object again: held stays recognised
            delta: Delta | None = (frozenset(self._added), frozenset(self._removed))
        else:
            delta = None
        self._base = frozenset(self._items)
        self._added.clear()
        self._removed.clear()
        return self._base, delta
