"""A prefix set's merged ranges, kept as its members come and go.

A ``hash:net`` IP set is an interval set on nftables: its prefixes are
merged into ranges that neither overlap nor touch, each range one item
(its start and the address after its end, :func:`range_item`). Worked
out whole, that is every member parsed, sorted and merged: 0.4 s at
100,000 prefixes, for every change Felix sends. :class:`PrefixRanges`
keeps the members' spans sorted and the merged ranges beside them, so a
member added merges with the ranges it overlaps or touches, and a member
removed merges again only the prefixes inside it (prefixes nest or are
apart: the rest of its range stays as it was).
"""

from __future__ import annotations

import bisect
import ipaddress
import socket
from collections.abc import Iterable

from dataplane.linux.nftables.elements import interval
from dataplane.linux.nftables.kept_items import KeptItems

__all__ = ["PrefixRanges", "merged", "range_item", "span"]

_FAMILY = {4: socket.AF_INET, 6: socket.AF_INET6}

Span = tuple[int, int]  # [start, end) of addresses


def span(member: str, version: int) -> Span:
    """[start, end) of one prefix, as ``ipaddress.ip_network`` reads it.

    The managers hand on canonical CIDRs, which inet_pton parses several
    times faster than ipaddress (a node's first apply reads every
    endpoint's addresses here). Anything else -- another family, host bits
    set, a malformed length -- goes to ipaddress, to be read or refused
    as it always was."""
    base, slash, length = member.partition("/")
    bits = 32 if version == 4 else 128
    try:
        start = int.from_bytes(socket.inet_pton(_FAMILY[version], base), "big")
    except (OSError, ValueError):  # ValueError: a NUL in the text
        start = -1
    if not slash:
        prefix = bits
    elif length.isascii() and length.isdigit() and int(length) <= bits:
        prefix = int(length)
    else:
        prefix = -1
    if start >= 0 and prefix >= 0:
        size = 1 << (bits - prefix)
        if not start & (size - 1):
            return start, start + size
    net = ipaddress.ip_network(member)
    return int(net.network_address), int(net.broadcast_address) + 1


def merged(spans: Iterable[Span]) -> list[Span]:
    """Sorted ``spans`` as merged ranges: none overlap or touch."""
    out: list[Span] = []
    for start, end in spans:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


def range_item(start: int, end: int, version: int) -> bytes:
    """One range as one item: its start element and, unless it runs to the
    last address, the end element after it, back to back."""
    width = 4 if version == 4 else 16
    last = end >= 1 << (8 * width)
    return b"".join(
        interval(start.to_bytes(width, "big"), None if last else end.to_bytes(width, "big"))
    )


def _end(r: Span) -> int:
    return r[1]


def _start(r: Span) -> int:
    return r[0]


class PrefixRanges:
    """The merged ranges of one family's prefixes, and their items."""

    def __init__(self, version: int, members: Iterable[str]) -> None:
        self._version = version
        self._spans = sorted(span(m, version) for m in members)  # one per member
        self._ranges = merged(self._spans)
        self.items = KeptItems(range_item(s, e, version) for s, e in self._ranges)

    def add(self, member: str) -> None:
        """One more member (a member's span is kept once per member)."""
        new = span(member, self._version)
        bisect.insort(self._spans, new)
        # The ranges it overlaps or touches: ends from its start on,
        # starts up to its end (they are sorted both ways: disjoint).
        lo = bisect.bisect_left(self._ranges, new[0], key=_end)
        hi = bisect.bisect_right(self._ranges, new[1], key=_start)
        joined = self._ranges[lo:hi]
        start = min(new[0], joined[0][0]) if joined else new[0]
        end = max(new[1], joined[-1][1]) if joined else new[1]
        self._replace(lo, hi, [(start, end)])

    def remove(self, member: str) -> None:
        """One member fewer: it must be one given before."""
        gone = span(member, self._version)
        at = bisect.bisect_left(self._spans, gone)
        if at == len(self._spans) or self._spans[at] != gone:
            raise KeyError(member)
        del self._spans[at]
        if self._covered(gone):
            return  # another member holds every address it held
        # Prefixes nest or are apart, never half overlap: in the range it
        # was in, the members before it covered up to its start and those
        # after it from its end. Only the members inside it are merged
        # again (a few, where a range of one member per address merged
        # again whole cost 37 ms at 100,000).
        j = bisect.bisect_right(self._ranges, gone[0], key=_start) - 1
        start, end = self._ranges[j]
        lo = bisect.bisect_left(self._spans, (gone[0], -1))
        hi = bisect.bisect_left(self._spans, (gone[1], -1))
        before = [(start, gone[0])] if start < gone[0] else []
        after = [(gone[1], end)] if gone[1] < end else []
        self._replace(j, j + 1, merged([*before, *self._spans[lo:hi], *after]))

    def _covered(self, block: Span) -> bool:
        """Whether a member's prefix holds ``block`` (its own, or a shorter one)."""
        start, end = block
        size, top = end - start, 1 << (32 if self._version == 4 else 128)
        while size <= top:
            base = start & ~(size - 1)
            at = bisect.bisect_left(self._spans, (base, base + size))
            if at < len(self._spans) and self._spans[at] == (base, base + size):
                return True
            size <<= 1
        return False

    def _replace(self, lo: int, hi: int, ranges: list[Span]) -> None:
        version = self._version
        for s, e in self._ranges[lo:hi]:
            self.items.discard(range_item(s, e, version))
        self._ranges[lo:hi] = ranges
        for s, e in ranges:
            self.items.add(range_item(s, e, version))
