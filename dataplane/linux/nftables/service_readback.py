"""The services table read back: beside the applies, and before a start's first write.

A refresh (:meth:`ServiceReadBack.refresh`, beside the applies) reads the
table back through netlink in a worker thread: every set's elements,
compared with what is wanted, and the rules, each carrying a comment
that hashes what it says, compared chain by chain with the script's.
What differs is marked (the thread compares each set with a snapshot of
what is wanted as it reads it, and hands what looks different to the
loop, which checks it again against what is wanted by then); the next
apply writes only that (a missing table or set: everything). The first
apply (a restart) and a resync read the same way first: a table found
as it would be written keeps its rules and gets only the elements that
differ, so a restart onto a correct table writes nothing.

A mixin over :class:`~dataplane.linux.nftables.service_table.ServiceTable`'s state.
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import trio

from dataplane.linux.kernel.errors import KERNEL_ERRORS
from dataplane.linux.nftables.affinity_records import RecordRule, records
from dataplane.linux.nftables.elements import encoded, interval_end
from dataplane.linux.nftables.reader import ReadRule, TableSource
from dataplane.linux.nftables.service_layout import ServiceLayout
from dataplane.linux.nftables.service_rules import RECORD_CHAIN, expected_rules

__all__ = ["ServiceReadBack"]


class ServiceReadBack:
    """The read-back methods of :class:`~dataplane.linux.nftables.service_table.ServiceTable`."""

    layout: ServiceLayout
    element_writes: int
    structure_writes: int
    _reader: TableSource
    _rules: Callable[[Sequence[bytes]], None] | None
    _wanted: dict[str, dict[bytes, int]]
    _adds: dict[str, set[bytes]]
    _deletes: dict[str, set[bytes]]
    _pools: tuple[str, ...]
    _timeouts: set[int]
    _structure_written: bool
    _whole: bool
    _last_write: dict[str, int]

    if TYPE_CHECKING:  # the table's own

        def mark_for_resync(self) -> None: ...

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
        read = await trio.to_thread.run_sync(self._read, list(self._wanted), began, True)
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
        for name in self._wanted:
            self._adds.setdefault(name, set()).clear()
            self._deletes.setdefault(name, set()).clear()
        try:
            read = await trio.to_thread.run_sync(self._read, list(self._wanted), None, False)
        except KERNEL_ERRORS:
            return  # not known: written whole, as without a table
        if read is not None and read[0]:
            self._structure_written = True
            self._whole = False

    def _read(
        self, names: Sequence[str], began: int | None, always: bool
    ) -> tuple[bool, bool] | None:
        """In a worker thread: read the rules and the pools, then each set,
        handing each to the loop to compare (one set held at a time);
        whether the rules are ours as written and whether any element
        differs. The sets are read only if the rules are ours or
        ``always`` (a refresh repairs both at the next apply; the first
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
            for name in names:
                # The heavy part here: a snapshot of what is wanted (list()
                # of a dict is one step the loop cannot interleave with)
                # against what is held. What looks different is checked
                # again on the loop, against what is wanted by then.
                wanted = self._wanted.get(name, {})
                for _ in range(2):
                    held = {e.encoded() for e in reader.elements(family, table, name)}
                    missing = [e for e in list(wanted) if e not in held]
                    if not missing:
                        break
                    # Read once more: a dump that walks a hash set while the
                    # kernel grows it (in the background, after a large add)
                    # misses elements that are there.
                extra = [e for e in held if e not in wanted]
                if missing or extra:
                    mark = self._mark_set
                    differs |= trio.from_thread.run_sync(mark, name, missing, extra, began)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise
        return rules_held, differs

    def _structure_held(self, rules: Sequence[ReadRule], pools: set[bytes]) -> bool:
        """Whether the kernel holds the rules (by their comments, chain by
        chain, in order) and the IP pools the script would write."""
        held: dict[str, list[str]] = {}
        for rule in rules:
            held.setdefault(rule.chain, []).append(rule.comment)
        script = self.layout.structure(self._pools, sorted(self._timeouts))
        expected = expected_rules(script)
        netlink = self._netlink_rules()
        if netlink:
            expected[RECORD_CHAIN] = [r.comment for r in netlink]
        # nft may add an end at the lowest address (it does when a flush
        # and an add of the set share a transaction): it ends nothing.
        zero_end = interval_end(bytes(4 if self.layout.version == 4 else 16))
        return held == expected and pools - {zero_end} == self._pool_elements()

    def _netlink_rules(self) -> list[RecordRule]:
        """The rules written through netlink after the script: IPv6's
        affinity records, for the timeouts in use (none without a writer
        for them: the chain the script makes then stays empty)."""
        if self.layout.version != 6 or self._rules is None:
            return []
        return records(sorted(self._timeouts))

    def _pool_elements(self) -> set[bytes]:
        """The pools set's elements as the kernel holds the prefixes: a
        start and, unless it runs to the last address, an end per merged range."""
        nets = [ipaddress.ip_network(p) for p in self._pools]
        out: set[bytes] = set()
        for net in ipaddress.collapse_addresses(nets):  # type: ignore[type-var]  # one family
            out.add(encoded(net.network_address.packed))
            if int(net.broadcast_address) < (1 << net.max_prefixlen) - 1:
                out.add(interval_end((net.broadcast_address + 1).packed))
        return out

    def _mark_set(
        self, name: str, missing: list[bytes], extra: list[bytes], began: int | None
    ) -> bool:
        """On the loop: of the elements set ``name`` was read without
        (``missing``) or with (``extra``), mark those still wanted or still
        unwanted; True if any. ``began``: the write count when the read
        began (a set written since is skipped: the read may predate it)."""
        if began is not None and self._last_write.get(name, 0) > began:
            return False
        wanted = self._wanted.get(name, {})
        lacking = [e for e in missing if e in wanted]
        stray = [e for e in extra if e not in wanted]
        self._adds.setdefault(name, set()).update(lacking)
        self._deletes.setdefault(name, set()).update(stray)
        return bool(lacking or stray)
