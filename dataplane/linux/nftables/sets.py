"""IP sets as native nftables sets: ``nft -f`` to make them, elements for members.

The nftables twin of :class:`~dataplane.linux.ipsets.programmer.IPSetsProgrammer`,
with its interface, so the platform can hold either. Each set lives in
our table of its family (rules look up only their own table's sets; the
table is the policy table's ``NftTable``). Making and deleting sets is
structure, one ``nft -f`` each; members are elements, written by our own
element writer (:mod:`~dataplane.linux.nftables.elements`) as the
difference from what was last written, every changed set in one
transaction.

What the kernel holds is known from what we wrote. At the first apply,
after :meth:`NftSets.mark_for_resync` and after a refused write, the sets
of ours in our tables are read back (parsed off the loop) and every
wanted set is compared with what the kernel holds: the difference is
written, which repairs any member deleted or added behind our back
(never a flush and a refill: an interval set flushed and refilled in one
transaction can be refused). :meth:`NftSets.refresh` does the same reading
beside the applies and marks only the sets that differ. A transaction the kernel refuses is written
again set by set; a set refused alone is quarantined (its old members
stay) and the others land -- unless every one of several fails, which is
the tool's or the kernel's fault, not a set's.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Callable, Mapping

import trio

from dataplane.core.quarantine import Quarantine, Unsaid
from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import CommandRunner
from dataplane.linux.kernel.errors import KERNEL_ERRORS
from dataplane.linux.kernel.written import Writes
from dataplane.linux.nftables.elements import (
    NFPROTO_IPV4,
    NFPROTO_IPV6,
    ElementChange,
    ElementSink,
)
from dataplane.linux.nftables.names import nft_name
from dataplane.linux.nftables.reader import TableSource
from dataplane.linux.nftables.sending import send
from dataplane.linux.nftables.set_elements import (
    expand,
    held_items,
    member_version,
    set_name,
    set_type,
)
from dataplane.linux.nftables.wanted_set import WantedSet
from dataplane.model import IPSet, IPSetType

__all__ = ["NftSets"]

_FAMILY = {4: ("ip", NFPROTO_IPV4), 6: ("ip6", NFPROTO_IPV6)}
_OUR_SET = re.compile(r"cali[46][0np][-_][A-Za-z0-9_]+")
_KINDS = {"0": IPSetType.IP, "n": IPSetType.NET, "p": IPSetType.IP_AND_PORT}


class NftSets:
    """Desired IP sets in, native sets of our tables out.

    Args:
        runner: runs ``nft`` (in a namespace, or a fake).
        writer: writes element transactions (:class:`ElementWriter`).
        reader: reads our sets back (:class:`TableReader`).
        tables: our table's name for each IP version programmed.
    """

    def __init__(
        self,
        runner: CommandRunner,
        writer: ElementSink,
        reader: TableSource,
        tables: Mapping[int, str],
        *,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self._runner = runner
        self._writer = writer
        self._reader = reader
        self._tables = {v: nft_name(t) for v, t in tables.items()}
        self._versions = tuple(sorted(self._tables))
        self.quarantine: Quarantine[str] = Quarantine(clock)
        self._unsaid: Unsaid[str] = Unsaid()
        self._wanted: dict[str, WantedSet] = {}
        # (version, name) -> the id of the wanted set so named.
        self._owners: dict[tuple[int, str], str] = {}
        self._dirty: set[str] = set()
        # Our sets the kernel holds, by (version, name), and their elements
        # as read back or last written; None: read them (again) first.
        self._held: dict[tuple[int, str], frozenset[bytes]] | None = None
        # Element and set transactions, and which touched each set last: a
        # refresh never takes back what it read before a write after it.
        self._writes: Writes[tuple[int, str]] = Writes()

    # -- desired state (no I/O) ---------------------------------------------

    def replace(self, ipset: IPSet) -> None:
        """Desired state of the set is exactly ``ipset``."""
        members: dict[int, set[str]] = {v: set() for v in self._versions}
        for member in ipset.members:
            bucket = members.get(member_version(member))
            if bucket is not None:  # None: an IPv6 member with IPv6 off
                bucket.add(member)
        # (Another type is another name: the old set goes at apply_deletions.)
        names = {v: set_name(ipset.id, v, ipset.type) for v in self._versions}
        self._forget(ipset.id)
        self._owners |= {(v, name): ipset.id for v, name in names.items()}
        self._wanted[ipset.id] = WantedSet(ipset.type, members, names)
        self.quarantine.release(ipset.id)
        self._dirty.add(ipset.id)

    def update_members(self, set_id: str, added: frozenset[str], removed: frozenset[str]) -> None:
        """Remove then add members of a set given to :meth:`replace` before."""
        wanted = self._wanted.get(set_id)
        if wanted is None:
            raise KeyError(f"IP set {set_id!r}: member update for a set never replaced")
        for member in removed:
            wanted.discard(member)
        for member in added:
            wanted.add(member)
        self.quarantine.release(set_id)
        self._dirty.add(set_id)

    def remove(self, set_id: str) -> None:
        """The set is no longer wanted; :meth:`apply_deletions` deletes it."""
        self._forget(set_id)
        self._wanted.pop(set_id, None)
        self.quarantine.release(set_id)
        self._dirty.discard(set_id)

    def _forget(self, set_id: str) -> None:
        """Drop ``set_id``'s names (another type is another name)."""
        old = self._wanted.get(set_id)
        if old is not None:
            for key in old.names.items():
                self._owners.pop(key, None)

    def kernel_name(self, set_id: str, version: int) -> str:
        """The name rules use to look up ``set_id``'s IPv``version`` members."""
        return self._wanted[set_id].names[version]

    def wants(self, set_id: str) -> bool:
        return set_id in self._wanted

    def counts(self) -> dict[int, int]:
        """Kernel sets desired per IP version (one per desired set and version)."""
        return dict.fromkeys(self._versions, len(self._wanted))

    def desired_ids(self) -> frozenset[str]:
        return frozenset(self._wanted)

    def mark_for_resync(self) -> None:
        """Read our sets back at the next apply and write what differs (repairs tampering)."""
        self._held = None

    # -- programming ----------------------------------------------------------

    async def _listed(self) -> dict[tuple[int, str], frozenset[bytes]]:
        """Our sets the kernel holds and their elements: read (our tables
        only) at the first apply and after a resync, then kept up to date."""
        if self._held is None:
            self._held = await self._read()
            # Every wanted set is compared with what was read. (Never a
            # flush and a refill: an interval set refilled in the
            # transaction that flushes it can be refused with EEXIST.)
            self._dirty |= set(self._wanted)
        return self._held

    async def _read(self) -> dict[tuple[int, str], frozenset[bytes]]:
        # Through netlink, our table's sets only: ``nft list sets`` fetches
        # every element of every set in the namespace first (the services
        # table's hundreds of thousands too) and took minutes at 20,000
        # services. Blocking reads: in a worker thread.
        return await trio.to_thread.run_sync(self._read_sets)

    def _our_sets(self, family: int, table: str) -> list[str]:
        try:
            return [n for n in self._reader.set_names(family, table) if _OUR_SET.fullmatch(n)]
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
            return []  # no table yet: no sets

    def _read_sets(self) -> dict[tuple[int, str], frozenset[bytes]]:
        held: dict[tuple[int, str], frozenset[bytes]] = {}
        for v in self._versions:
            family, table = _FAMILY[v][1], self._tables[v]
            for name in self._our_sets(family, table):
                try:
                    elements = self._reader.elements(family, table, name)
                    held[(v, name)] = held_items(_KINDS[name[5]], elements)
                except OSError as exc:
                    if exc.errno != errno.ENOENT:  # deleted since it was listed: not held
                        raise
        return held

    async def refresh(self) -> bool:
        """Read our sets back beside the applies; True if some differ.

        What differs is written by the next apply (the sets it belongs to
        are marked); applies may run while this reads. A set written after
        the read began keeps what that write left: the read may predate it.
        """
        if self._held is None:
            return False  # the next apply reads them all anyway
        began = self.writes
        read = await self._read()
        held = self._held
        if held is None:
            return False  # a refusal made the next apply read them again
        changed = self._writes.merge(held, read, began)
        self._writes.settled(began)
        for key in changed:
            owner = self._owners.get(key)
            if owner is not None:
                self._dirty.add(owner)
        return bool(changed)

    @property
    def writes(self) -> int:
        """Element and set transactions (observability, tests)."""
        return self._writes.count

    def _names(self, set_id: str) -> dict[int, str]:
        return self._wanted[set_id].names

    async def apply_updates(self) -> None:
        """Make new sets, then write every changed set's members in one transaction."""
        held = await self._listed()
        due = {i for i in self.quarantine.due() if i in self._wanted}
        ids = sorted(
            i
            for i in (self._dirty & self._wanted.keys()) | due
            if i not in self.quarantine or i in due
        )
        await self._make(held, ids)
        plans = {set_id: self._plan(held, set_id) for set_id in ids}
        plans = {i: p for i, p in plans.items() if p[0]}  # sets that differ
        if plans:
            try:
                await send(self._writer, [c for changes, _ in plans.values() for c in changes])
            except KERNEL_ERRORS:
                await self._isolate(plans)
            else:
                for set_id, (_, written) in plans.items():
                    held.update(written)
                    self._writes.wrote(written)
                    self.quarantine.release(set_id)
        self._dirty -= set(ids)

    async def _make(self, held: dict[tuple[int, str], frozenset[bytes]], ids: list[str]) -> None:
        lines = []
        for v in self._versions:
            family = _FAMILY[v][0]
            table = f"{family} {self._tables[v]}"
            new = [
                (set_id, name)
                for set_id in ids
                if (v, name := self.kernel_name(set_id, v)) not in held
            ]
            if new:
                lines.append(f"add table {table}")
            lines += [
                f"add set {table} {name} {{ {set_type(v, self._wanted[set_id].kind)}; }}"
                for set_id, name in new
            ]
        if not lines:
            return
        result = await self._runner.run(
            ["nft", "-f", "-"], stdin="".join(f"{line}\n" for line in lines).encode(), check=False
        )
        if result.returncode != 0:
            message = result.stderr.decode(errors="replace").strip().splitlines()
            raise ProgrammingError(
                "nft refused new IP sets: " + (message[0] if message else "no reason given")
            )
        made = [(v, self.kernel_name(set_id, v)) for v in self._versions for set_id in ids]
        for key in made:
            held.setdefault(key, frozenset())
        self._writes.wrote(made)

    def _plan(
        self, held: Mapping[tuple[int, str], frozenset[bytes]], set_id: str
    ) -> tuple[list[ElementChange], dict[tuple[int, str], frozenset[bytes]]]:
        """The element changes that make ``set_id`` as wanted, and what the
        kernel then holds of it."""
        wanted = self._wanted[set_id]
        changes: list[ElementChange] = []
        written: dict[tuple[int, str], frozenset[bytes]] = {}
        for v in self._versions:
            name = self.kernel_name(set_id, v)
            family, table = _FAMILY[v][1], self._tables[v]
            have = held.get((v, name))
            if have is None:  # made just now
                have = frozenset()
            want, delta = wanted.elements(v, have)
            if delta is None:
                if have == want:
                    continue
                delta = (want - have, have - want)
            adds, deletes = delta
            if not adds and not deletes:
                continue
            # Deletes first: a range's end may be the next one's start.
            if deletes:
                changes.append(ElementChange("delete", family, table, name, expand(deletes)))
            if adds:
                changes.append(ElementChange("add", family, table, name, expand(adds)))
            written[(v, name)] = want
        return changes, written

    async def _isolate(
        self,
        plans: Mapping[str, tuple[list[ElementChange], dict[tuple[int, str], frozenset[bytes]]]],
    ) -> None:
        """Write each set alone; quarantine those the kernel refuses.

        Raises:
            ProgrammingError: every one of several sets failed: the fault is
                not a set's, nothing is quarantined, the apply fails whole.
        """
        held = self._held
        assert held is not None
        failed: list[tuple[str, BaseException]] = []
        for set_id, (changes, written) in plans.items():
            try:
                await send(self._writer, changes)
            except KERNEL_ERRORS as exc:
                failed.append((set_id, exc))
            else:
                held.update(written)
                self._writes.wrote(written)
                self.quarantine.release(set_id)
        if failed:
            # What a refused set holds is read back before the next write
            # (never a flush and a refill: see _listed).
            self._held = None
        if len(failed) > 1 and len(failed) == len(plans):
            raise ProgrammingError(f"the kernel refused every IP set: {failed[0][1]}")
        for set_id, error in failed:
            self.quarantine.reject(set_id, str(error))

    def held_back(self) -> dict[str, str]:
        """IP sets (by id) in quarantine now, and the kernel's reason."""
        return self.quarantine.reasons()

    def take_refusals(self) -> list[tuple[str, str]]:
        """(set id, the kernel's reason) of sets newly quarantined since the last call."""
        return self._unsaid.news(self.held_back())

    async def apply_deletions(self) -> None:
        """Delete our sets no longer wanted. Call once no rule references them."""
        held = await self._listed()
        stale = sorted(held.keys() - self._owners.keys())
        if stale:
            await self._delete(stale)
            for key in stale:
                del held[key]
            self._writes.wrote(stale)

    async def _delete(self, keys: list[tuple[int, str]]) -> None:
        lines = [f"delete set {_FAMILY[v][0]} {self._tables[v]} {name}\n" for v, name in keys]
        result = await self._runner.run(
            ["nft", "-f", "-"], stdin="".join(lines).encode(), check=False
        )
        if result.returncode != 0:
            message = result.stderr.decode(errors="replace").strip().splitlines()
            raise ProgrammingError(
                "nft refused to delete IP sets: " + (message[0] if message else "no reason given")
            )

    async def cleanup_all(self) -> None:
        """Delete every set of ours in our tables, wanted or not; nothing else."""
        self._held = None
        held = await self._listed()
        if held:
            await self._delete(sorted(held))
        self._held = {}
        self._dirty = set(self._wanted)
