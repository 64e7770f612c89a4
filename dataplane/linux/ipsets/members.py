"""Desired IP set members, split by IP version, in the spelling ``ipset save`` prints.

hash:net drops a full-length prefix and refuses a /0, which becomes its two
/1 halves (as Felix does); keeping the desired members in that spelling
makes comparing them with a read-back plain set arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterable

from dataplane.linux.ipsets.names import main_name
from dataplane.model import IPSet, IPSetType

__all__ = ["WantedSet", "member_version"]


_HOST_LEN = {4: "32", 6: "128"}
_ZERO = {4: "0.0.0.0/0", 6: "::/0"}
_HALVES = {4: ("0.0.0.0/1", "128.0.0.0/1"), 6: ("::/1", "8000::/1")}


def member_version(member: str) -> int:
    # "10.0.0.1,tcp:80" has a colon too: look at the address part only.
    return 6 if ":" in member.partition(",")[0] else 4


def _net_forms(member: str, version: int) -> tuple[str, ...]:
    address, _, length = member.partition("/")
    if not length or length == _HOST_LEN[version]:
        return (address,)
    if length == "0":
        return _HALVES[version]
    return (member,)


class WantedSet:
    """One desired set: canonical members and kernel-spelled members per version.

    For hash:ip and hash:ip,port both spellings agree and ``kernel`` is the
    very same dicts of sets; only hash:net keeps a second copy.
    """

    __slots__ = ("kernel", "members", "names", "type")

    def __init__(self, ipset: IPSet, versions: tuple[int, ...]) -> None:
        self.type = ipset.type
        self.names = {v: main_name(ipset.id, v, ipset.type) for v in versions}
        self.members: dict[int, set[str]] = {v: set() for v in versions}
        for member in ipset.members:
            bucket = self.members.get(member_version(member))
            if bucket is not None:  # None: an IPv6 member with IPv6 off
                bucket.add(member)
        self.kernel = self.members
        if ipset.type is IPSetType.NET:
            self.kernel = {
                v: {form for m in ms for form in _net_forms(m, v)} for v, ms in self.members.items()
            }

    def add(self, added: Iterable[str]) -> None:
        for member in added:
            v = member_version(member)
            bucket = self.members.get(v)
            if bucket is None:
                continue
            bucket.add(member)
            if self.kernel is not self.members:
                self.kernel[v].update(_net_forms(member, v))

    def discard(self, removed: Iterable[str]) -> None:
        for member in removed:
            v = member_version(member)
            bucket = self.members.get(v)
            if bucket is None or member not in bucket:
                continue
            bucket.remove(member)
            if self.kernel is not self.members:
                for form in _net_forms(member, v):
                    if not self._still_wanted(form, v):
                        self.kernel[v].discard(form)

    def _still_wanted(self, form: str, v: int) -> bool:
        # Two canonical members can share a kernel form: "0.0.0.0/0" and
        # "0.0.0.0/1" both need "0.0.0.0/1". Keep it while any wants it.
        bucket = self.members[v]
        if form in bucket:
            return True
        if "/" not in form:
            return f"{form}/{_HOST_LEN[v]}" in bucket
        return form in _HALVES[v] and _ZERO[v] in bucket
