"""One IP set as the nftables sets programmer wants it, and its items.

A set's items are what the kernel must hold for its members (one per
address, or per address and port; a prefix set's merged ranges). Each
change Felix sends used to work every item out again from every member,
on the loop: 0.2 s at 100,000 addresses, 0.7 s with ports, 1.4 s for
prefixes. A set that has changed since it was made keeps its items and
changes them member by member (a prefix set through
:class:`~dataplane.linux.nftables.prefix_ranges.PrefixRanges`, about 240
bytes a prefix); one never changed after it was made (most of them)
keeps nothing, and its first change works them out whole once. What a
kept set's items changed since the last plan is recorded beside them
(:class:`~dataplane.linux.nftables.kept_items.KeptItems`), so its next
plan need not compare them whole with the kernel's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dataplane.linux.nftables.kept_items import Delta, KeptItems
from dataplane.linux.nftables.prefix_ranges import PrefixRanges
from dataplane.linux.nftables.set_elements import elements_of, member_item, member_version
from dataplane.model import IPSetType

__all__ = ["WantedSet"]


@dataclass(slots=True)
class WantedSet:
    """One IP set as wanted: its kind, its members and our names by
    version, and the kernel's items for them (see the module doc)."""

    kind: IPSetType
    members: dict[int, set[str]]  # canonical members, by IP version
    # Our name for it per IP version: computed once (a hash for most ids),
    # as every rule that looks the set up asks for it.
    names: dict[int, str]
    # The kernel's items for ``members``, by version: kept only once the
    # set has changed since it was made (see the module doc).
    items: dict[int, KeptItems] = field(default_factory=dict)
    prefixes: dict[int, PrefixRanges] = field(default_factory=dict)
    changed: bool = False

    def add(self, member: str) -> None:
        version = member_version(member)
        bucket = self.members.get(version)
        if bucket is None or member in bucket:
            return  # None: an IPv6 member with IPv6 off
        bucket.add(member)
        self.changed = True
        if version in self.prefixes:
            self.prefixes[version].add(member)
        elif version in self.items:
            self.items[version].add(self._item(version, member))

    def discard(self, member: str) -> None:
        version = member_version(member)
        bucket = self.members.get(version)
        if bucket is None or member not in bucket:
            return
        bucket.discard(member)
        self.changed = True
        if version in self.prefixes:
            self.prefixes[version].remove(member)
        elif version in self.items:
            self.items[version].discard(self._item(version, member))

    def _item(self, version: int, member: str) -> bytes:
        item = member_item(self.kind, version, member)
        assert item is not None  # a prefix set keeps PrefixRanges instead
        return item

    def elements(
        self, version: int, have: frozenset[bytes]
    ) -> tuple[frozenset[bytes], Delta | None]:
        """The kernel's items for the members of ``version``, and what they
        add to and delete from ``have`` (the kernel's copy) when that is
        known without comparing them whole (see ``KeptItems.against``)."""
        members = self.members[version]
        if self.kind is IPSetType.NET:
            if version not in self.prefixes and self.changed:
                self.prefixes[version] = PrefixRanges(version, members)
            if version in self.prefixes:
                return self.prefixes[version].items.against(have)
        elif version not in self.items and self.changed:
            self.items[version] = KeptItems(elements_of(self.kind, version, members))
        if version in self.items:
            return self.items[version].against(have)
        return elements_of(self.kind, version, members), None  # nothing kept: worked out whole
