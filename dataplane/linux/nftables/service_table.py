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

A refresh (:meth:`ServiceTable.refresh`, beside the applies) reads the
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

ClientIP affinity is remembered by the packet path, in maps we never
write but to sweep them: when an affinity frontend's backends narrow (a
backend gone, a policy now Local, affinity off), after the write that
stops new entries pointing there, the maps are read back (in a worker
thread) and the entries no longer allowed deleted; after a resync or a
restart, every entry is checked.
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Callable, Iterable, Mapping, Sequence

import trio

from dataplane.core.quarantine import Unsaid
from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import CommandRunner
from dataplane.linux.kernel.errors import KERNEL_ERRORS
from dataplane.linux.nftables.affinity_records import RecordRule, records
from dataplane.linux.nftables.elements import (
    ElementChange,
    ElementSink,
    encoded,
    interval_end,
    send,
)
from dataplane.linux.nftables.reader import ReadRule, TableSource
from dataplane.linux.nftables.rule_messages import rule_message
from dataplane.linux.nftables.service_layout import (
    NOTHING,
    Affinity,
    Contribution,
    Elements,
    FrontendElements,
    ServiceLayout,
    second_bank,
    split,
)
from dataplane.linux.nftables.service_rules import RECORD_CHAIN, expected_rules
from dataplane.model.services import Service, ServiceKey

__all__ = ["ServiceTable"]

# An affinity frontend: (node port?, its key).
_Sticky = tuple[bool, bytes]
# Entries that expire between the sweep's read and its delete make the
# kernel refuse the delete (ENOENT); read again, this many times at most.
_SWEEP_ATTEMPTS = 3


class ServiceTable:
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
        self._sweeps: set[_Sticky] = set()
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

    # --- refresh ------------------------------------------------------------------------

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

    # --- affinity -----------------------------------------------------------------------

    def _affinity_of(self, sticky: _Sticky) -> Affinity | None:
        """The affinity of a frontend as in force now (None: none)."""
        node_port, key = sticky
        frontend = self._in_force(
            (b"n" if node_port else b"r") + key
        )  # as contribution() names them
        return frontend.affinity if frontend else None

    def _sticky(self) -> dict[_Sticky, Affinity]:
        """Every affinity frontend in force."""
        out = {}
        for ident in self._claims:
            frontend = self._in_force(ident)
            if frontend is not None and frontend.affinity is not None:
                out[(frontend.affinity.node_port, frontend.affinity.key)] = frontend.affinity
        return out

    def _in_force(self, ident: bytes) -> FrontendElements | None:
        """Frontend ``ident`` as its owner (the lowest-named claim) has it."""
        claims = self._claims.get(ident)
        return self._services[min(claims)].frontends[ident] if claims else None

    async def _sweep(self) -> int:
        """Delete the affinity entries that point where their frontend's
        clients may no longer go (after the write that stops new ones being
        recorded); how many.

        Raises:
            ProgrammingError: the kernel refused the read or the delete
                (the sweep stays due).
        """
        if not (self._sweep_all or self._sweeps):
            return 0
        # Taken now: a change while the maps are read is the next sweep's.
        everything, self._sweep_all = self._sweep_all, False
        taken, self._sweeps = self._sweeps, set()
        # Judged by what is in force now, not when the frontend narrowed.
        rules: dict[_Sticky, Affinity | None] = {}
        rules.update(self._sticky() if everything else {s: self._affinity_of(s) for s in taken})
        pools = [ipaddress.ip_network(p) for p in self._pools]
        changes: list[ElementChange] = []
        for attempt in range(_SWEEP_ATTEMPTS):
            try:
                changes = await trio.to_thread.run_sync(self._stale, rules, everything, pools)
                if changes:
                    await self._write(changes)
                break
            except KERNEL_ERRORS as exc:
                expired = isinstance(exc, OSError) and exc.errno == errno.ENOENT
                if expired and attempt + 1 < _SWEEP_ATTEMPTS:
                    continue  # an entry expired in between: read again
                self._sweep_all |= everything
                self._sweeps |= taken
                raise ProgrammingError(
                    f"the kernel refused the {self.layout.family} {self.layout.table}"
                    f" affinity sweep: {exc}"
                ) from exc
        count = sum(len(c.elements) for c in changes)
        self.swept += count
        return count

    def _stale(
        self,
        rules: Mapping[_Sticky, Affinity | None],
        everything: bool,
        pools: list[ipaddress.IPv4Network | ipaddress.IPv6Network],
    ) -> list[ElementChange]:
        """The deletes of every stale entry (in a worker thread: the maps
        hold up to AFFINITY_SIZE entries each)."""
        family, table = self.layout.nfproto, self.layout.table
        width = 4 if self.layout.version == 4 else 16  # the client's address, first
        changes = []
        for node_port, prefix in ((False, ""), (True, "np_")):
            held = {
                name: {
                    e.key: e.data
                    for e in self._reader.elements(family, table, f"{prefix}aff_{name}")
                }
                for name in ("addr", "port")
            }
            doomed = []
            for entry in held["addr"].keys() | held["port"].keys():
                client, frontend = entry[:width], entry[width:]
                if (node_port, frontend) not in rules and not everything:
                    continue
                rule = rules.get((node_port, frontend))
                target = (held["addr"].get(entry, b""), held["port"].get(entry, b""))
                address = ipaddress.ip_address(client)
                if rule is None or not rule.allows(
                    target, from_pools=any(address in p for p in pools)
                ):
                    doomed.append(entry)
            for name in ("addr", "port"):
                gone = tuple(encoded(e) for e in doomed if e in held[name])
                if gone:
                    changes.append(
                        ElementChange("delete", family, table, f"{prefix}aff_{name}", gone)
                    )
        return changes

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
