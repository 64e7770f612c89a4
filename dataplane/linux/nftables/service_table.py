"""The services table programmer: structure once with ``nft -f``, then only elements.

The desired state lives in memory: each service's elements
(:class:`~dataplane.linux.nftables.service_layout.ServiceLayout`), and
per set a count of the services that want each element (a backend's
hairpin pair is shared by every service that has it). A change of a
service is the difference of its elements, kept as pending adds and
deletes; an apply writes them through our own netlink writer
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

import ipaddress
from collections.abc import Callable, Iterable, Mapping, Sequence

from dataplane.core.quarantine import Unsaid
from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import CommandRunner
from dataplane.linux.kernel.errors import KERNEL_ERRORS
from dataplane.linux.nftables.elements import (
    ElementChange,
    ElementSink,
    send,
)
from dataplane.linux.nftables.reader import TableSource
from dataplane.linux.nftables.rule_messages import rule_message
from dataplane.linux.nftables.service_layout import (
    NOTHING,
    Contribution,
    Elements,
    FrontendElements,
    ServiceLayout,
    second_bank,
    split,
)
from dataplane.linux.nftables.service_readback import ServiceReadBack
from dataplane.linux.nftables.service_rules import RECORD_CHAIN
from dataplane.linux.nftables.service_sweeps import AffinitySweeps, Sticky
from dataplane.model.services import Service, ServiceKey

__all__ = ["ServiceTable"]


class ServiceTable(ServiceReadBack, AffinitySweeps):
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
        self._services: dict[ServiceKey, Contribution] = {}
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
        self._wanted: dict[str, dict[bytes, int]] = {n: {} for n in layout.element_sets()}
        # Elements whose wanted count crossed zero since the last write.
        self._adds: dict[str, set[bytes]] = {n: set() for n in layout.element_sets()}
        self._deletes: dict[str, set[bytes]] = {n: set() for n in layout.element_sets()}
        self._pools: tuple[str, ...] = ()
        self._timeouts: set[int] = set()  # of affinity in use: a record rule each
        # Affinity frontends narrowed since the last sweep, and whether to
        # check every entry.
        self._sweeps: set[Sticky] = set()
        self._sweep_all = True
        self._structure_written = False
        self._whole = True  # write every element: first apply, or a resync
        self.structure_writes = 0
        self.element_writes = 0
        self.swept = 0  # affinity entries deleted
        # For refresh: each write numbered, the last that touched each set.
        self._last_write: dict[str, int] = {}

    # --- desired state ---------------------------------------------------------------

    def set_service(self, service: Service) -> None:
        contribution = self.layout.contribution(service)
        for f in contribution.frontends.values():
            if f.affinity is not None and f.affinity.timeout not in self._timeouts:
                # A timeout not in use yet: its record rules are structure.
                self._timeouts.add(f.affinity.timeout)
                self._structure_written = False
        self._replace(service.key, contribution)

    def remove_service(self, key: ServiceKey) -> None:
        self._replace(key, NOTHING)

    def set_pools(self, prefixes: Iterable[str]) -> None:
        """The IP pools' prefixes of this family (traffic from them is from pods).

        Raises:
            ValueError: not a prefix of this family (they are written into
                the nft script, so nothing else may pass).
        """
        nets = {ipaddress.ip_network(p, strict=False) for p in prefixes}
        if any(n.version != self.layout.version for n in nets):
            raise ValueError(f"IPv{self.layout.version} pools only: {sorted(map(str, nets))}")
        pools = tuple(str(n) for n in sorted(nets))
        if pools != self._pools:
            self._pools = pools
            self._structure_written = False

    def _replace(self, key: ServiceKey, new: Contribution) -> None:
        old = self._services.pop(key, NOTHING)
        if new.frontends or new.shared:
            self._services[key] = new
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
            self._count(_elements(before), _elements(after))
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
        source = contribution if owner == key else self._services[owner]
        return source.frontends[ident]

    def _count(self, old: Mapping[str, Elements], new: Mapping[str, Elements]) -> None:
        if not old:  # a start's every service: no differences to take
            for name, elements in new.items():
                self._add(name, elements)
            return
        for name in old.keys() | new.keys():
            before, after = set(old.get(name, ())), set(new.get(name, ()))
            self._remove(name, before - after)
            self._add(name, after - before)

    def _add(self, name: str, elements: Iterable[bytes]) -> None:
        """One more user of each element; the first one's element is written."""
        wanted = self._wanted.setdefault(name, {})  # affinity's live sets come and go
        note = not self._whole  # a whole write takes every element anyway
        for element in elements:
            count = wanted.get(element, 0)
            wanted[element] = count + 1
            if note and not count:
                self._note(name, element, present=True)

    def _remove(self, name: str, elements: Iterable[bytes]) -> None:
        """One user fewer of each element; the last one's element is deleted."""
        wanted = self._wanted.setdefault(name, {})
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
                label = self._services[loser].frontends[ident].label
                out.setdefault(f"service {loser}", []).append(f"{label} is service {owner}'s")
        return {what: "; ".join(sorted(why)) for what, why in out.items()}

    def take_refusals(self) -> list[tuple[str, str]]:
        """(what, why) newly held back since the last call: one report each."""
        return self._unsaid.news(self.held_back())

    def _note(self, name: str, element: bytes, *, present: bool) -> None:
        if self._whole:
            return  # the next write is every element anyway
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

    def _changes(self) -> list[ElementChange]:
        layout = self.layout
        family, table = layout.nfproto, layout.table
        if self._whole:
            changes = [ElementChange("flush", family, table, n, ()) for n in self._wanted]
            changes += [
                ElementChange("add", family, table, n, tuple(wanted))
                for n, wanted in self._wanted.items()
                if wanted
            ]
            return changes
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
        try:
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

    async def _write_structure(self) -> None:
        """The table's sets and rules, re-asserted in one transaction.

        A table of ours whose sets nft will not re-declare (another
        layout's, after an upgrade: a set of another type) is replaced in
        the same transaction and every element written again after it:
        services pause for that one element transaction rather than stay
        on a layout this version cannot program.
        """
        layout = self.layout
        script = layout.structure(self._pools, sorted(self._timeouts))
        result = await self._runner.run(["nft", "-f", "-"], stdin=script.encode(), check=False)
        if result.returncode == 0:
            await self._write_netlink_rules()
            return
        where = f"{layout.family} {layout.table}"
        replace = f"add table {where}\ndelete table {where}\n{script}"
        again = await self._runner.run(["nft", "-f", "-"], stdin=replace.encode(), check=False)
        if again.returncode != 0:
            lines = again.stderr.decode(errors="replace").strip().splitlines()
            raise ProgrammingError(
                f"nft refused the {where} table: "
                + (lines[0] if lines else f"exit {again.returncode}")
            )
        self._whole = True
        await self._write_netlink_rules()

    async def _write_netlink_rules(self) -> None:
        """Fill the chain the script made and flushed for the rules nft
        cannot write (IPv6 affinity records). Between the two transactions
        new clients of an affinity service are balanced without being
        remembered: only when the structure is written (start, resync, a
        new timeout).

        Raises:
            ProgrammingError: the kernel refused them.
        """
        wanted = self._netlink_rules()
        if not wanted or self._rules is None:  # (the second: for the type checker)
            return
        layout = self.layout
        messages = [
            rule_message(layout.nfproto, layout.table, RECORD_CHAIN, r.exprs(), r.comment)
            for r in wanted
        ]
        try:
            self._rules(messages)
        except OSError as exc:
            raise ProgrammingError(
                f"the kernel refused the {layout.family} {layout.table} affinity records: {exc}"
            ) from exc

    async def _write(self, changes: list[ElementChange]) -> None:
        await send(self._writer, changes)
        self.element_writes += 1
        for change in changes:
            self._last_write[change.set] = self.element_writes

    async def cleanup(self) -> None:
        """Delete the table (ours alone)."""
        layout = self.layout
        await self._runner.run(["nft", "delete", "table", layout.family, layout.table], check=False)
        self.mark_for_resync()


def _elements(frontend: FrontendElements | None) -> Mapping[str, Elements]:
    return frontend.elements if frontend else {}
