"""What a services table wants the kernel to hold, made again from its services. Pure.

The table keeps each service's model value and the counts of the shared
elements, not every frontend's elements (two thirds of its memory at
10,000 services). Where all of them are needed -- a whole write, a
read-back -- they are made again, one service at a time, from the
services as they are (or as a snapshot had them): each frontend by its
owner, the lowest-named service claiming it.

A read-back compares a set with what is wanted by a digest first (how
many elements, and the sum of their hashes), so the elements of a set
that matches are never all alive at once; only the sets whose digests
differ are made whole and compared element by element.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from dataplane.linux.nftables.elements import ElementChange
from dataplane.linux.nftables.service_layout import Elements, ServiceLayout
from dataplane.model.services import Service, ServiceKey

__all__ = ["Digest", "Wanted", "collect", "digest", "digests", "owned_elements", "whole_write"]

# How many elements, and the sum of their hashes (mod 2**64): equal for
# equal sets whatever the order; unequal sets collide with odds of 2**-64
# (Python's hash of bytes is keyed per process: no input can aim at it).
Digest = tuple[int, int]
_MASK = (1 << 64) - 1
# Elements per change of a whole write: about one netlink message's worth.
_CHUNK = 1_000


def owned_elements(
    services: Iterable[tuple[ServiceKey, Service]],
    layout: ServiceLayout,
    contested: Mapping[bytes, ServiceKey],
) -> Iterator[tuple[str, Elements]]:
    """Each set's elements from every frontend, by its owner (``contested``:
    the owner of each frontend more than one service claims)."""
    for key, service in services:
        for ident, frontend in layout.frontends(service).items():
            owner = contested.get(ident)
            if owner is None or owner == key:
                yield from frontend.elements.items()


@dataclass(frozen=True, slots=True)
class Wanted:
    """What a table wanted at one moment: its services, the owner of each
    frontend more than one claims, and the shared sets' elements. Taken on
    the loop; its elements are made from it in a worker thread."""

    services: list[tuple[ServiceKey, Service]]
    owners: dict[bytes, ServiceKey]
    shared: dict[str, list[bytes]]

    def pieces(self, layout: ServiceLayout) -> Iterator[tuple[str, Elements]]:
        return owned_elements(self.services, layout, self.owners)


def digest(elements: Iterable[bytes]) -> Digest:
    count = total = 0
    for element in elements:
        count += 1
        total += hash(element)
    return count, total & _MASK


def digests(pieces: Iterable[tuple[str, Elements]]) -> dict[str, Digest]:
    """Per set, the digest of all its pieces together."""
    counts: dict[str, int] = {}
    totals: dict[str, int] = {}
    for name, elements in pieces:
        counts[name] = counts.get(name, 0) + len(elements)
        totals[name] = totals.get(name, 0) + sum(map(hash, elements))
    return {name: (counts[name], totals[name] & _MASK) for name in counts}


def collect(
    pieces: Iterable[tuple[str, Elements]], only: Collection[str] | None = None
) -> dict[str, list[bytes]]:
    """Per set (of ``only``, or every one), its elements."""
    out: dict[str, list[bytes]] = {}
    for name, elements in pieces:
        if only is None or name in only:
            out.setdefault(name, []).extend(elements)
    return out


def whole_write(
    layout: ServiceLayout,
    names: Sequence[str],
    wanted: Wanted,
    *,
    chunk: int = _CHUNK,
    flush: bool = True,
) -> Iterator[ElementChange]:
    """Sets ``names`` flushed, then filled with what is ``wanted``, a set's
    elements handed on as each ``chunk`` fills (the writer encodes each
    into the batch as it comes: the batch, not the elements, is what is
    held). Without ``flush`` when the sets were just made, empty: the
    kernel's commit of 336 flushes of empty sets is 11-15 ms."""
    family, table = layout.nfproto, layout.table
    for name in names if flush else ():
        yield ElementChange("flush", family, table, name, ())
    known = set(names)
    pending: dict[str, list[bytes]] = {}
    for name, elements in wanted.pieces(layout):
        if name not in known:
            continue
        held = pending.setdefault(name, [])
        held.extend(elements)
        while len(held) >= chunk:
            yield ElementChange("add", family, table, name, tuple(held[:chunk]))
            del held[:chunk]
    for name, counted in wanted.shared.items():
        if name in known:
            pending.setdefault(name, []).extend(counted)
    for name, held in pending.items():
        for at in range(0, len(held), chunk):
            yield ElementChange("add", family, table, name, tuple(held[at : at + chunk]))
