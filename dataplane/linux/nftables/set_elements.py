"""IP set members as native nftables set elements, and the sets' names and types. Pure.

The three kinds of IP set Felix sends become three kinds of set in our own
table (rules can look up only their own table's sets):

* ``ip``: addresses, ``type ipv4_addr`` (``ipv6_addr``);
* ``ip-and-port`` (named ports): ``ipv4_addr . inet_proto . inet_service``,
  one element per ``address,protocol:port``;
* ``net``: prefixes, a set with ``flags interval``. The kernel keeps
  ranges as a start element and an end element (the first address past
  the range, flagged as an end), and takes no two that overlap or touch:
  the members are merged into ranges first, so a member added or removed
  may change its neighbours' ranges too; the difference is computed range
  by range, a changed range deleted and added whole (see
  :func:`elements_of`).

Members arrive canonical and checked (``managers/scalars.py``).
"""

from __future__ import annotations

import base64
import hashlib
import re
import socket
import sys
from collections.abc import Iterable

from dataplane.linux.nftables.elements import (
    Field,
    addr,
    concat,
    encoded,
    ifname,
    interval,
    port,
    proto,
    ranged,
)
from dataplane.linux.nftables.prefix_ranges import merged, range_item, span
from dataplane.linux.nftables.reader import ReadElement
from dataplane.model import IPSetType

__all__ = [
    "elements_of",
    "expand",
    "held_items",
    "interface_ranges",
    "member_item",
    "member_version",
    "set_name",
    "set_type",
]

_LETTER = {IPSetType.IP: "0", IPSetType.NET: "n", IPSetType.IP_AND_PORT: "p"}
_PROTOCOLS = {"tcp": 6, "udp": 17, "sctp": 132}
_READABLE = re.compile(r"[A-Za-z0-9_]{1,64}")
_FAMILY = {4: socket.AF_INET, 6: socket.AF_INET6}


def member_version(member: str) -> int:
    # "10.0.0.1,tcp:80" has no colon in its address; an IPv6 one does.
    return 6 if ":" in member.partition(",")[0] else 4


def set_name(set_id: str, version: int, kind: IPSetType) -> str:
    """Our name for ``set_id``'s IPv``version`` set: the id itself where nft
    can spell it (after a dash), else a hash of it (after an underscore, so
    the two forms never meet)."""
    prefix = f"cali{version}{_LETTER[kind]}"
    if _READABLE.fullmatch(set_id):
        return f"{prefix}-{set_id}"
    digest = base64.b32encode(hashlib.sha256(set_id.encode()).digest()).decode()
    return f"{prefix}_{digest[:26].lower()}"


def set_type(version: int, kind: IPSetType) -> str:
    """The set's declaration body, as ``add set`` takes it."""
    address = "ipv4_addr" if version == 4 else "ipv6_addr"
    if kind is IPSetType.IP_AND_PORT:
        return f"type {address} . inet_proto . inet_service"
    if kind is IPSetType.NET:
        return f"type {address}; flags interval"
    return f"type {address}"


def _address(text: str, version: int) -> bytes:
    return socket.inet_pton(_FAMILY[version], text)


def _ranges(members: Iterable[str], version: int) -> list[tuple[int, int]]:
    """The members as merged [start, end) ranges: none overlap or touch."""
    return merged(sorted(span(m, version) for m in members))


def _ip_item(member: str, version: int) -> bytes:
    return encoded(_address(member, version))


def _ip_port_item(member: str, version: int) -> bytes:
    address, _, proto_port = member.rpartition(",")
    protocol, _, number = proto_port.partition(":")
    return encoded(concat((addr(address), proto(_PROTOCOLS[protocol]), port(int(number)))))


# The kinds whose sets hold one element per member (not ranges merged
# from several): a member added or removed is that one item.
_PER_MEMBER = {IPSetType.IP: _ip_item, IPSetType.IP_AND_PORT: _ip_port_item}


def member_item(kind: IPSetType, version: int, member: str) -> bytes | None:
    """The one :func:`elements_of` item ``member`` is of a set of ``kind``;
    None for a prefix set, whose items are ranges merged across members."""
    item = _PER_MEMBER.get(kind)
    return None if item is None else item(member, version)


def elements_of(kind: IPSetType, version: int, members: Iterable[str]) -> frozenset[bytes]:
    """What the kernel must hold for these members of one family: one item
    per element, or per range of a prefix set (see :func:`expand`)."""
    item = _PER_MEMBER.get(kind)
    if item is not None:
        return frozenset(item(m, version) for m in members)
    # One item per range, its start and end elements together: a range
    # changed is deleted whole and added whole in one transaction, as nft
    # does it. (Deleting a range's start while keeping its end, beside a
    # new start, is refused with EEXIST now and then by this kernel.)
    return frozenset(range_item(start, end, version) for start, end in _ranges(members, version))


def held_items(kind: IPSetType, elements: Iterable[ReadElement]) -> frozenset[bytes]:
    """A set's elements as a netlink dump reads them, as :func:`elements_of`
    items: one per element, or per range (its start and the end after it,
    in key order) of a prefix set. An end without a start before it is kept
    alone, so a set someone else changed differs and is written again."""
    if kind is not IPSetType.NET:
        return frozenset(e.encoded() for e in elements)
    items: set[bytes] = set()
    start: bytes | None = None
    for element in sorted(elements, key=lambda e: (e.key, not e.interval_end)):
        if not element.interval_end:
            if start is not None:  # two starts in a row: the first runs on
                items.add(b"".join(interval(start, None)))
            start = element.key
        elif start is None:
            items.add(element.encoded())
        else:
            items.add(b"".join(interval(start, element.key)))
            start = None
    if start is not None:
        items.add(b"".join(interval(start, None)))  # to the last address
    return frozenset(items)


def expand(items: Iterable[bytes]) -> tuple[bytes, ...]:
    """The kernel's elements of :func:`elements_of` items (a range's item
    holds its two elements back to back)."""
    out = []
    for item in items:
        at = 0
        while at < len(item):
            length = int.from_bytes(item[at : at + 2], sys.byteorder)
            size = (length + 3) & ~3
            out.append(item[at : at + size])
            at += size
    return tuple(out)


def interface_ranges(iface: str, nets: Iterable[str], version: int) -> frozenset[bytes]:
    """Elements of an ``ifname . address`` interval set: ``iface`` with
    each of ``nets`` (one family, merged into ranges: the kernel takes no
    two of one interface that overlap)."""
    width = 4 if version == 4 else 16
    name = ifname(iface)
    return frozenset(
        ranged(
            concat((name, Field(start.to_bytes(width, "big")))),
            concat((name, Field((end - 1).to_bytes(width, "big")))),
        )
        for start, end in _ranges(nets, version)
    )
