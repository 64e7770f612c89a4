"""Address sets of one IP family as sorted intervals: the exact CIDR arithmetic ACLs need.

HNS ACLs can only say "any of these CIDRs", so everything else a Calico rule
says about an address -- several IP sets that must all match, a CIDR list
cut by negated CIDRs or sets, a pass rule's match combined with the next
tier's -- is computed here exactly and rendered back as the fewest CIDRs.
Intervals (first, last) over the family's integers make intersection and
difference a linear merge, whatever the nesting of the CIDRs involved.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = ["AddressSet"]

_BITS = {4: 32, 6: 128}
Interval = tuple[int, int]


def _merged(intervals: Iterable[Interval]) -> tuple[Interval, ...]:
    out: list[Interval] = []
    for first, last in sorted(intervals):
        if out and first <= out[-1][1] + 1:
            if last > out[-1][1]:
                out[-1] = (out[-1][0], last)
        else:
            out.append((first, last))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class AddressSet:
    """The addresses of one family (4 or 6) in disjoint, sorted, non-adjacent intervals."""

    version: int
    intervals: tuple[Interval, ...]

    @classmethod
    def everything(cls, version: int) -> AddressSet:
        return cls(version, ((0, 2 ** _BITS[version] - 1),))

    @classmethod
    def of(cls, version: int, cidrs: Iterable[str]) -> AddressSet:
        """The union of the family's CIDRs (or bare addresses) in ``cidrs``; others ignored."""
        spans = []
        for text in cidrs:
            net = ipaddress.ip_network(text, strict=False)
            if net.version == version:
                spans.append((int(net.network_address), int(net.broadcast_address)))
        return cls(version, _merged(spans))

    def __bool__(self) -> bool:
        return bool(self.intervals)

    def union(self, other: AddressSet) -> AddressSet:
        assert other.version == self.version
        return AddressSet(self.version, _merged((*self.intervals, *other.intervals)))

    def intersection(self, other: AddressSet) -> AddressSet:
        assert other.version == self.version
        out: list[Interval] = []
        a, b, i, j = self.intervals, other.intervals, 0, 0
        while i < len(a) and j < len(b):
            first, last = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
            if first <= last:
                out.append((first, last))
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return AddressSet(self.version, tuple(out))

    def difference(self, other: AddressSet) -> AddressSet:
        assert other.version == self.version
        out: list[Interval] = []
        cuts, j = other.intervals, 0
        for first, last in self.intervals:
            start = first
            while j < len(cuts) and cuts[j][1] < start:
                j += 1
            k = j
            while k < len(cuts) and cuts[k][0] <= last:
                if cuts[k][0] > start:
                    out.append((start, cuts[k][0] - 1))
                start = max(start, cuts[k][1] + 1)
                k += 1
            if start <= last:
                out.append((start, last))
        return AddressSet(self.version, tuple(out))

    def _cidrs(self) -> Iterator[str]:
        address = ipaddress.IPv4Address if self.version == 4 else ipaddress.IPv6Address
        for first, last in self.intervals:
            for net in ipaddress.summarize_address_range(address(first), address(last)):
                yield str(net)

    def cidrs(self) -> tuple[str, ...]:
        """The fewest CIDRs that cover exactly this set, in address order."""
        return _cidrs(self)

    def cidr_count_at_most(self, limit: int) -> bool:
        """True if :meth:`cidrs` has at most ``limit`` entries (stops counting past it)."""
        return sum(1 for _ in itertools.islice(self._cidrs(), limit + 1)) <= limit


@functools.lru_cache(maxsize=8192)
def _cidrs(addresses: AddressSet) -> tuple[str, ...]:
    # The same sets recur in every endpoint that uses a policy: text them once.
    return tuple(addresses._cidrs())
