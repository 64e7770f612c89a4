"""The services table programmer: structure once with ``nft -f``, then only elements.

The desired state lives in memory: each service's model value, whose
elements (:class:`~dataplane.linux.nftables.service_layout.ServiceLayout`)
are made again where a change, a whole write or a read-back needs them
(:mod:`~dataplane.linux.nftables.service_wanted`), and per shared set a
count of the services that want each element (a backend's hairpin pair
is shared by every service that has it). A change of a service is the
difference of its elements, kept as pending adds and deletes; an apply
writes them through our own netlink writer
(:mod:`dataplane.linux.nftables.elements`) -- no ``nft`` process, no
re-read, nothing re-validated -- in one transaction, or two when
backends changed: first the new slots, add-only, in the table's second
bank (in force at once), then the rest with every deletion (which the
kernel commits only after an RCU grace period).

Two services claiming one frontend: the lowest-named one owns it, the
other is held back (:meth:`ServiceTable.held_back`) until it lets go.

The table itself (sets, maps, the fixed rules, the IP pools' prefixes) is
written with ``nft -f`` when it is not found as it would be written (the
first apply, a resync), when the pools or the affinity timeouts in use
change, and when a refresh finds its rules differ: ``add`` leaves
existing sets and their elements in place and the rules are rewritten
in the same transaction, so traffic is never without them. After such a
write at the first apply or a resync the elements are written whole --
every set flushed and filled again in one transaction, which the kernel
applies at once -- so anything deleted or added behind our back ends
exactly as desired without a moment of half-programmed services.

The table is read back beside the applies, and at a start before the
first write (:mod:`~dataplane.linux.nftables.service_readback`); ClientIP
affinity's remembered entries are swept when a frontend's backends narrow
(:mod:`~dataplane.linux.nftables.service_sweeps`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from dataplane.core.quarantine import Unsaid
from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import CommandRunner
from dataplane.linux.kernel.errors import KERNEL_ERRORS
from dataplane.linux.nftables.elements import ElementChange, ElementSink
from dataplane.linux.nftables.reader import TableSource
from dataplane.linux.nftables.sending import PIECE, send, send_in_pieces
from dataplane.linux.nftables.service_banks import second_bank, split
from dataplane.linux.nftables.service_layout import (
    NOTHING,
    Contribution,
    Elements,
    FrontendElements,
    ServiceLayout,
)
from dataplane.linux.nftables.service_readback import ServiceReadBack
from dataplane.linux.nftables.service_rules import live_set
from dataplane.linux.nftables.service_structure import ServiceStructure
from dataplane.linux.nftables.service_sweeps import AffinitySweeps, Sticky
from dataplane.linux.nftables.service_wanted import Wanted, whole_write
from dataplane.model.services import Service, ServiceKey

__all__ = ["ServiceTable"]


class ServiceTable(ServiceReadBack, ServiceStructure, AffinitySweeps):
    def __init__(
        self,
        layout: ServiceLayout,
        runner: CommandRunner,
        writer: ElementSink,
        reader: TableSource,
        rules: Callable[[Sequence[bytes]], None] | None = None,
    ) -> None:
        self.layout = layout
        self._runner = runner
        self._writer = writer
        self._reader = reader
        # Who writes the rules nft cannot (IPv6 affinity records): the
        # element writer's rule batches, or a fake.
        self._rules = rules
        # Each service's model value: its elements are made from it where a
        # change or a write needs them, never kept (see _contribution).
        self._services: dict[ServiceKey, Service] = {}
        self._claims: dict[bytes, set[ServiceKey]] = {}  # frontend -> services claiming it
        # The frontends more than one service claims: held_back() runs after
        # every apply, and walking every claim there cost a change time in
        # proportion to the node's services (about 20 ms of each at 10,000).
        self._contested: set[bytes] = set()
        self._unsaid: Unsaid[str] = Unsaid()
        # Frontends whose slots changed (parts "all"/"local") and those
        # where more changed, since the last apply.
        self._flips: dict[bytes, set[str]] = {}
        self._framed: set[bytes] = set()
        # Per shared set, how many services want each element (a frontend's
        # own elements are wanted by its owner alone: no count).
        self._shared: dict[str, dict[bytes, int]] = {}
        # Elements newly wanted or no longer wanted since the last write.
        self._adds: dict[str, set[bytes]] = {n: set() for n in layout.element_sets()}
        self._deletes: dict[str, set[bytes]] = {n: set() for n in layout.element_sets()}
        self._pools: tuple[str, ...] = ()
        # Per read-back under way, the elements noted since its snapshot.
        self._watches: list[dict[str, set[bytes]]] = []
        self._timeouts: set[int] = set()  # of affinity in use: a record rule each
        # Affinity frontends narrowed since the last sweep, and whether to
        # check every entry.
        self._sweeps: set[Sticky] = set()
        self._sweep_all = True
        self._structure_written = False
        self._whole = True  # write every element: first apply, or a resync
        # The first apply found no table: its whole write may land in
        # pieces of about this many elements (sending.py).
        self._fresh = False
        self.piece = PIECE
        self.structure_writes = 0
        self.element_writes = 0
        self.swept = 0  # affinity entries deleted
        # For refresh: each write numbered, the last that touched each set.
        self._last_write: dict[str, int] = {}

    # --- desired state ---------------------------------------------------------------

    def set_service(self, service: Service) -> None:
        self._replace(service.key, service)

    def remove_service(self, key: ServiceKey) -> None:
        self._replace(key, None)

    def _contribution(self, key: ServiceKey) -> Contribution:
        """What service ``key`` adds now, made again from its model value:
        the elements are not kept (they were two thirds of the table's
        memory), only ever made where a change or a write needs them."""
        service = self._services.get(key)
        return NOTHING if service is None else self.layout.contribution(service)

    def _timeouts_of(self, timeouts: Iterable[int]) -> None:
        for timeout in timeouts:
            if timeout not in self._timeouts:
                # A timeout not in use yet: its record rules are structure.
                self._timeouts.add(timeout)
                self._structure_written = False

    def _replace(self, key: ServiceKey, service: Service | None) -> None:
        if self._whole and key not in self._services and service is not None:
            outline = self.layout.outline(service)
            if not any(ident in self._claims for ident in outline.frontends):
                if not (outline.frontends or outline.shared):
                    return
                # A start's every service: the next apply writes every
                # element, and no frontend of another changes hands.
                self._services[key] = service
                self._timeouts_of(outline.timeouts)
                self._count({}, outline.shared)
                for ident in outline.frontends:
                    self._claims[ident] = {key}
                return
        old = self._contribution(key)
        new = NOTHING if service is None else self.layout.contribution(service)
        self._timeouts_of(f.affinity.timeout for f in new.frontends.values() if f.affinity)
        self._services.pop(key, None)
        if service is not None and (new.frontends or new.shared):
            self._services[key] = service
        self._count(old.shared, new.shared)
        # A frontend two services claim (the same external IP and port,
        # say) is the lowest-named one's, as long as it claims it; the
        # other is held back. Either way the kernel gets one set of
        # elements per frontend, never two maps of slots for one key.
        for ident in old.frontends.keys() | new.frontends.keys():
            claims = self._claims.setdefault(ident, set())
            before = self._owned(ident, key, old)
            if ident in new.frontends:
                claims.add(key)
            else:
                claims.discard(key)
            if not claims:
                del self._claims[ident]
            if len(claims) > 1:
                self._contested.add(ident)
            else:
                self._contested.discard(ident)
            after = self._owned(ident, key, new)
            self._differ(_elements(before), _elements(after))
            self._note_flip(ident, _elements(before), _elements(after))
            self._note_sweep(before, after)

    def _note_sweep(self, before: FrontendElements | None, after: FrontendElements | None) -> None:
        old = before.affinity if before else None
        new = after.affinity if after else None
        if old is not None and old.narrowed(new):
            self._sweeps.add((old.node_port, old.key))

    def _note_flip(
        self,
        ident: bytes,
        before: Mapping[str, Elements],
        after: Mapping[str, Elements],
    ) -> None:
        """Remember a frontend whose slots changed and nothing else: its new
        slots can go in force through the second bank, add-only."""
        if self._whole or not (before and after) or before == after:
            return
        old, new = split(before), split(after)
        if old["frame"] != new["frame"]:
            self._framed.add(ident)  # more than slots changed: one transaction
            return
        for part in ("all", "local"):
            if old[part] and new[part] and old[part] != new[part]:
                self._flips.setdefault(ident, set()).add(part)

    def _owned(
        self, ident: bytes, key: ServiceKey, contribution: Contribution
    ) -> FrontendElements | None:
        """Frontend ``ident`` as in force, ``key``'s being ``contribution``."""
        claims = self._claims.get(ident)
        if not claims:
            return None
        owner = min(claims)
        source = contribution if owner == key else self._contribution(owner)
        return source.frontends[ident]

    def _differ(self, old: Mapping[str, Elements], new: Mapping[str, Elements]) -> None:
        """A frontend's elements as in force changed: no other frontend has
        any of them (each names its frontend), so no count is needed."""
        if self._whole or old == new:
            return
        for name in old.keys() | new.keys():
            before, after = set(old.get(name, ())), set(new.get(name, ()))
            for element in before - after:
                self._note(name, element, present=False)
            for element in after - before:
                self._note(name, element, present=True)

    def _count(self, old: Mapping[str, Elements], new: Mapping[str, Elements]) -> None:
        """The shared elements: a count of the services wanting each."""
        if not old:
            for name, elements in new.items():
                self._add(name, elements)
            return
        for name in old.keys() | new.keys():
            before, after = set(old.get(name, ())), set(new.get(name, ()))
            self._remove(name, before - after)
            self._add(name, after - before)

    def _add(self, name: str, elements: Iterable[bytes]) -> None:
        """One more user of each element; the first one's element is written."""
        wanted = self._shared.setdefault(name, {})
        note = not self._whole  # a whole write takes every element anyway
        for element in elements:
            count = wanted.get(element, 0)
            wanted[element] = count + 1
            if note and not count:
                self._note(name, element, present=True)

    def _remove(self, name: str, elements: Iterable[bytes]) -> None:
        """One user fewer of each element; the last one's element is deleted."""
        wanted = self._shared.setdefault(name, {})
        for element in elements:
            count = wanted.pop(element) - 1
            if count:
                wanted[element] = count
            else:
                self._note(name, element, present=False)

    def held_back(self) -> dict[str, str]:
        """Services not programmed whole: a frontend of theirs is another's."""
        out: dict[str, list[str]] = {}
        for ident in self._contested:
            claims = self._claims[ident]
            owner = min(claims)
            for loser in claims - {owner}:
                label = self._contribution(loser).frontends[ident].label
                out.setdefault(f"service {loser}", []).append(f"{label} is service {owner}'s")
        return {what: "; ".join(sorted(why)) for what, why in out.items()}

    def take_refusals(self) -> list[tuple[str, str]]:
        """(what, why) newly held back since the last call: one report each."""
        return self._unsaid.news(self.held_back())

    def _note(self, name: str, element: bytes, *, present: bool) -> None:
        if self._whole:
            return  # the next write is every element anyway
        for watch in self._watches:  # read-backs under way: this one changed
            watch.setdefault(name, set()).add(element)
        adds = self._adds.setdefault(name, set())
        deletes = self._deletes.setdefault(name, set())
        if present:
            # Deleted and wanted again before a write: the kernel still has it.
            if element in deletes:
                deletes.discard(element)
            else:
                adds.add(element)
        elif element in adds:
            adds.discard(element)
        else:
            deletes.add(element)

    def mark_for_resync(self) -> None:
        """Rewrite the table and every element at the next apply (repairs tampering)."""
        self._structure_written = False
        self._whole = True
        self._sweep_all = True

    # --- apply -----------------------------------------------------------------------

    def _in_force_first(self) -> dict[str, frozenset[bytes]]:
        """The second-bank elements of every frontend whose slots changed
        (and nothing else): added in a transaction of their own, they put
        the new backends in force at once, before the slower one below."""
        out: dict[str, set[bytes]] = {}
        for ident, parts in self._flips.items():
            frontend = self._in_force(ident)
            if ident in self._framed or frontend is None:
                continue
            now = split(frontend.elements)
            for part in parts:
                if now[part]:
                    for name, members in second_bank(now[part]).items():
                        out.setdefault(name, set()).update(members)
        return {name: frozenset(members) for name, members in out.items()}

    def set_names(self) -> list[str]:
        """Every set and map the elements go to: the table's, and the live
        sets of the affinity timeouts in use."""
        names = list(self.layout.element_sets())
        for timeout in sorted(self._timeouts):
            names += [live_set(timeout, node_port=False), live_set(timeout, node_port=True)]
        return names

    def _wanted(self) -> Wanted:
        """What the table wants now, as a snapshot a worker can make the
        elements from while the loop goes on changing the table (a frontend
        more than one service claims is owned by the lowest-named)."""
        return Wanted(
            list(self._services.items()),
            {ident: min(self._claims[ident]) for ident in self._contested},
            {name: list(counted) for name, counted in self._shared.items()},
        )

    def _whole_write(self, *, flush: bool = True) -> Iterator[ElementChange]:
        """Every set flushed (unless just made) and filled again: the
        changes are made as the writer takes them (in a worker thread), from
        a snapshot taken now, so the elements of 10,000 services are never
        all alive at once."""
        return whole_write(self.layout, self.set_names(), self._wanted(), flush=flush)

    def _changes(self) -> list[ElementChange]:
        layout = self.layout
        family, table = layout.nfproto, layout.table
        # Deletes first: a map slot whose backend changed is its key
        # deleted and added again, in the same transaction.
        changes = [
            ElementChange("delete", family, table, n, tuple(els))
            for n, els in self._deletes.items()
            if els
        ]
        changes += [
            ElementChange("add", family, table, n, tuple(els))
            for n, els in self._adds.items()
            if els
        ]
        return changes

    async def apply(self) -> bool:
        """Write what changed; True if anything was written.

        Raises:
            ProgrammingError: nft refused the table, or the kernel refused
                the element transaction (none of it was applied; the next
                apply writes every element again).
        """
        wrote = False
        if not self._structure_written and self._whole:
            # A restart or a resync: what is in place may be right already.
            await self._take_in_place()
        if not self._structure_written:
            await self._write_structure()
            self._structure_written = True
            self.structure_writes += 1
            wrote = True
        family, table = self.layout.nfproto, self.layout.table
        # A backend change is slots deleted and added again, and the kernel
        # commits a deletion only after an RCU grace period (~15 ms). So
        # the new slots go in first, add-only, in the second bank; the
        # second transaction then rewrites the first bank and empties the
        # second, traffic going to the same backends throughout.
        first = {} if self._whole else self._in_force_first()
        changes: list[ElementChange] = []
        try:
            if self._whole:
                await self._write_whole()
                wrote = True
            else:
                if first:
                    await self._write(
                        [ElementChange("add", family, table, n, tuple(e)) for n, e in first.items()]
                    )
                changes = self._changes()
                changes += [
                    ElementChange("delete", family, table, n, tuple(e)) for n, e in first.items()
                ]
                if changes:
                    await self._write(changes)
        except KERNEL_ERRORS as exc:
            self._whole = True  # what the kernel holds is unknown to us now
            raise ProgrammingError(
                f"the kernel refused the {self.layout.family} {self.layout.table} elements: {exc}"
            ) from exc
        finally:
            self._flips.clear()
            self._framed.clear()
        self._whole = False
        for name in self._adds:
            self._adds[name].clear()
            self._deletes[name].clear()
        swept = await self._sweep()
        return wrote or bool(first or changes or swept)

    async def _write_whole(self) -> None:
        """Every element: in one transaction into a table in use (never
        seen half full), in pieces into one the first apply made."""
        fresh, self._fresh = self._fresh, False  # a retry is one transaction
        if fresh:
            # The structure's nft run just made every set: nothing to flush.
            changes = self._whole_write(flush=False)
            await send_in_pieces(self._writer, changes, elements=self.piece, flushes=False)
            self._written(self.set_names())
        else:
            await self._write(self._whole_write(), self.set_names())

    async def _write(
        self, changes: Iterable[ElementChange], sets: Iterable[str] | None = None
    ) -> None:
        """One transaction; ``sets``: those it touches, if ``changes`` can be
        read only once (a whole write)."""
        await send(self._writer, changes)
        self._written((c.set for c in changes) if sets is None else sets)

    def _written(self, sets: Iterable[str]) -> None:
        self.element_writes += 1
        for name in sets:
            self._last_write[name] = self.element_writes


def _elements(frontend: FrontendElements | None) -> Mapping[str, Elements]:
    return frontend.elements if frontend else {}
