"""The services table read back: beside the applies, and before a start's first write.

A refresh (:meth:`ServiceReadBack.refresh`, beside the applies) reads the
table back through netlink in a worker thread: every set's elements,
compared with what is wanted, and the rules, each carrying a comment
that hashes what it says, compared chain by chain with the script's.
What differs is marked: the thread makes what is wanted from a snapshot
of the services (:mod:`~dataplane.linux.nftables.service_wanted`),
compares each set by digest and, where the digests differ, element by
element, and hands the loop what differs, which marks it but for the
elements a change noted since the snapshot (that change's apply writes
them). The next apply writes only that (a missing table or set:
everything). The first
apply (a restart) and a resync read the same way first: a table found
as it would be written keeps its rules and gets only the elements that
differ, so a restart onto a correct table writes nothing.

A mixin over :class:`~dataplane.linux.nftables.service_table.ServiceTable`'s state.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import trio

from dataplane.linux.kernel.errors import KERNEL_ERRORS
from dataplane.linux.nftables.reader import ReadRule, TableSource
from dataplane.linux.nftables.service_layout import ServiceLayout
from dataplane.linux.nftables.service_wanted import Wanted, collect, digest, digests

__all__ = ["ServiceReadBack"]


class ServiceReadBack:
    """The read-back methods of :class:`~dataplane.linux.nftables.service_table.ServiceTable`."""

    layout: ServiceLayout
    element_writes: int
    structure_writes: int
    _reader: TableSource
    _watches: list[dict[str, set[bytes]]]
    _adds: dict[str, set[bytes]]
    _deletes: dict[str, set[bytes]]
    _structure_written: bool
    _whole: bool
    _fresh: bool
    _last_write: dict[str, int]

    if TYPE_CHECKING:  # the table's own

        def mark_for_resync(self) -> None: ...

        def set_names(self) -> list[str]: ...

        def _wanted(self) -> Wanted: ...

        def _structure_held(self, rules: Sequence[ReadRule], pools: set[bytes]) -> bool: ...

    async def refresh(self) -> bool:
        """Read the table back beside the applies (never holding the loop)
        and mark what differs for the next apply; True if anything does.

        Applies may run meanwhile: a set written after the read began is
        left to the next refresh, and the rules' verdict is dropped if a
        structure write overtook the read.

        Raises:
            OSError: the kernel refused the read (other than ENOENT: a
                table or set missing is marked, everything to write).
        """
        if not self._structure_written or self._whole:
            return False  # the next apply writes everything anyway
        began, structures = self.element_writes, self.structure_writes
        read = await self._read_back(began, always=True)
        if read is None:
            self.mark_for_resync()
            return True
        rules_held, elements_differ = read
        if not rules_held and self.structure_writes == structures:
            self._structure_written = False  # a chain flushed, a rule deleted or changed
            return True
        return elements_differ

    async def _take_in_place(self) -> None:
        """At the first apply and after a resync: if the table holds our
        rules as they would be written, keep them, and write only the
        elements that differ (a restart onto a correct table writes
        nothing). Otherwise the structure and every element are written.
        """
        for name in self.set_names():
            self._adds.setdefault(name, set()).clear()
            self._deletes.setdefault(name, set()).clear()
        try:
            read = await self._read_back(None, always=False)
            # No table at all: no packet relies on its sets yet, so the
            # elements may land in pieces (linux/nftables/sending.py).
            self._fresh = await self._absent()
        except KERNEL_ERRORS:
            return  # not known: written whole, as without a table
        if read is not None and read[0]:
            self._structure_written = True
            self._whole = False

    async def _absent(self) -> bool:
        """Whether the kernel holds no set of our table (none, or the table
        itself missing): no rule can send a packet to what is not there."""
        family, table = self.layout.nfproto, self.layout.table
        try:
            return not await trio.to_thread.run_sync(self._reader.set_names, family, table)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return True  # the table itself is not there
            raise

    async def _read_back(self, began: int | None, *, always: bool) -> tuple[bool, bool] | None:
        """:meth:`_read` in a worker thread, on a snapshot of what is wanted
        taken now; the elements noted as changing meanwhile are watched."""
        snapshot = self._wanted()
        watch: dict[str, set[bytes]] = {}
        self._watches.append(watch)
        try:
            return await trio.to_thread.run_sync(
                self._read, self.set_names(), snapshot, watch, began, always
            )
        finally:
            self._watches.remove(watch)

    def _read(
        self,
        names: Sequence[str],
        snapshot: Wanted,
        watch: dict[str, set[bytes]],
        began: int | None,
        always: bool,
    ) -> tuple[bool, bool] | None:
        """In a worker thread: read the rules and the pools, then each set,
        comparing it with the snapshot of what is wanted (by digest; only
        the sets that differ element by element), handing what differs to
        the loop to mark. Whether the rules are ours as written and whether
        any element differs. The sets are read only if the rules are ours
        or ``always`` (a refresh repairs both at the next apply; the first
        apply writes every element if the rules are not ours). None: the
        table or a set is missing."""
        family, table = self.layout.nfproto, self.layout.table
        reader = self._reader
        differs = False
        try:
            rules = reader.rules(family, table)
            pools = {e.encoded() for e in reader.elements(family, table, "pools")}
            rules_held = trio.from_thread.run_sync(self._structure_held, rules, pools)
            if not (rules_held or always):
                return False, False
            wanted = digests(snapshot.pieces(self.layout))
            wanted.update((name, digest(counted)) for name, counted in snapshot.shared.items())
            unlike: dict[str, list[bytes]] = {}  # what is held, where it differs
            for name in names:
                for _ in range(2):
                    held = [e.encoded() for e in reader.elements(family, table, name)]
                    if digest(held) == wanted.get(name, (0, 0)):
                        break
                    # Read once more: a dump that walks a hash set while the
                    # kernel grows it (in the background, after a large add)
                    # misses elements that are there.
                else:
                    unlike[name] = held
            if not unlike:
                return rules_held, False
            whole = collect(snapshot.pieces(self.layout), unlike)
            for name, counted in snapshot.shared.items():
                whole.setdefault(name, []).extend(counted)
            for name, held in unlike.items():
                want, have = set(whole.get(name, ())), set(held)
                missing, extra = list(want - have), list(have - want)
                mark = self._mark_set
                differs |= trio.from_thread.run_sync(mark, name, missing, extra, watch, began)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise
        return rules_held, differs

    def _mark_set(
        self,
        name: str,
        missing: list[bytes],
        extra: list[bytes],
        watch: Mapping[str, set[bytes]],
        began: int | None,
    ) -> bool:
        """On the loop: of the elements set ``name`` was read without
        (``missing``) or with (``extra``) against the snapshot, mark those
        still so; True if any. An element noted as changing since the
        snapshot (``watch``) is the apply's to write, or the next refresh's
        to find. ``began``: the write count when the read began (a set
        written since is skipped: the read may predate it)."""
        if began is not None and self._last_write.get(name, 0) > began:
            return False
        changed = watch.get(name, set())
        lacking = [e for e in missing if e not in changed]
        stray = [e for e in extra if e not in changed]
        self._adds.setdefault(name, set()).update(lacking)
        self._deletes.setdefault(name, set()).update(stray)
        return bool(lacking or stray)
