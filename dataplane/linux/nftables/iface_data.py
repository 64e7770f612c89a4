"""Per-interface data in our table: elements keyed by interface, no ``nft``.

An endpoint on nftables is mostly data (``docs/nftables.md``): which
shared chain its interface dispatches to (a verdict map element) and which
source addresses it may send from (an ``ifname . ipv4_addr`` interval set).
Here those sets and maps of one table keep, per interface, the elements
wanted and the elements the kernel holds, and write the difference through
our own element writer: an endpoint added is one element transaction, with
none of the ruleset fetch every ``nft`` run costs.

Every element's key starts with its interface, so what a read back finds
is sorted by interface without any other bookkeeping. The sets themselves
are structure, declared by :class:`~dataplane.linux.nftables.table.NftTable`
in its ``nft -f`` script (:meth:`InterfaceData.declarations`). A verdict
element that changed rides in that script when one runs anyway
(:meth:`InterfaceData.script_verdicts`): the kernel validates the whole
table at each commit holding a jump or goto, ~10 ms on a loaded node, so
one commit is cheaper than two, and in it the element moves away from a
chain before the chain is deleted. Everything else is written through the
element writer after the script, when the chains it reaches exist.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Mapping
from dataclasses import dataclass

import trio

from dataplane.errors import ProgrammingError
from dataplane.linux.nftables.elements import ElementChange, ElementSink
from dataplane.linux.nftables.names import nft_name
from dataplane.linux.nftables.reader import TableSource
from dataplane.linux.nftables.sending import send

__all__ = ["DataSet", "Held", "InterfaceData"]

_IFNAMSIZ = 16  # the kernel's interface name, NUL-padded: every key's first field
# An interface name written quoted into a script: what real names use.
_SCRIPT_IFACE = re.compile(r"[A-Za-z0-9_.-]{1,15}")


def _script_iface(iface: str) -> str:
    if not _SCRIPT_IFACE.fullmatch(iface):
        raise ValueError(f"not an interface name for a script: {iface!r}")
    return iface


@dataclass(frozen=True, slots=True)
class Held:
    """One interface's elements in one set: encoded, and for a verdict
    map the chain its element reaches."""

    elements: frozenset[bytes] = frozenset()
    reaches: str = ""


@dataclass(frozen=True, slots=True)
class DataSet:
    """A set or map of ours, as ``add set`` / ``add map`` declares it."""

    name: str
    spec: str  # "type ifname : verdict", "type ifname . ipv4_addr; flags interval"

    @property
    def is_map(self) -> bool:
        return ":" in self.spec


class InterfaceData:
    """The per-interface sets and maps of table ``table`` (``family``: the
    nfproto number); see the module doc."""

    def __init__(self, family: int, table: str, sink: ElementSink, source: TableSource) -> None:
        self.family = family
        self.table = nft_name(table)
        self._sink = sink
        self._source = source
        self._sets: dict[str, DataSet] = {}
        self._wanted: dict[str, dict[str, Held]] = {}
        # What the kernel holds, per set and interface; None until read.
        self._held: dict[str, dict[str, Held]] | None = None
        self._missing: set[str] = set()  # sets the last read did not find
        self._dirty: dict[str, set[str]] = {}
        # (set, interface) -> what the script being written gives it.
        self._scripted: dict[tuple[str, str], Held] = {}
        self.writes = 0  # element transactions (tests, refresh guard)
        self.reads = 0

    # --- desired state -----------------------------------------------------------

    def declare(self, data_set: DataSet) -> None:
        nft_name(data_set.name)
        if self._sets.get(data_set.name) == data_set:
            return
        self._sets[data_set.name] = data_set
        self._wanted.setdefault(data_set.name, {})
        self._missing.add(data_set.name)  # declared in the next script

    def put(self, name: str, iface: str, held: Held) -> None:
        """Interface ``iface``'s elements of set ``name`` (none: it has none)."""
        wanted = self._wanted[name]
        if wanted.get(iface, Held()) == held:
            return
        if held.elements:
            wanted[iface] = held
        else:
            wanted.pop(iface, None)
        self._dirty.setdefault(name, set()).add(iface)

    def wanted_chains(self, name: str) -> dict[str, str]:
        """Verdict map ``name``: interface -> the chain its element reaches."""
        return {iface: held.reaches for iface, held in self._wanted[name].items()}

    def has_elements(self, name: str, iface: str) -> bool:
        return iface in self._wanted[name]

    # --- what the structure script needs -------------------------------------------

    def declarations(self, where: str) -> list[str]:
        """``add set``/``add map`` lines for every set of ours (``where``:
        "ip cali"); harmless where the set exists with the same type."""
        return [
            f"add {'map' if s.is_map else 'set'} {where} {s.name} {{ {s.spec}; }}"
            for s in self._sets.values()
        ]

    @property
    def missing(self) -> bool:
        """Some set is not known to be in the kernel: the next script declares them."""
        return bool(self._missing)

    def script_verdicts(self, where: str | None) -> list[str]:
        """The verdict maps' changes as lines of a script that runs anyway
        (``where``: "ip cali"; None: no script runs). In its transaction
        they cost no commit of their own: the kernel validates the table
        once per commit, ~10 ms on a loaded node, and a commit holding a
        jump or goto element validates it. Taken as written by
        :meth:`declared`; the rest goes through the element writer."""
        self._scripted = {}
        if where is None or self._held is None:
            return []
        deleted: list[str] = []
        added: list[str] = []
        for name, data_set in self._sets.items():
            if not data_set.is_map:
                continue
            wanted, held = self._wanted[name], self._held.get(name, {})
            for iface in sorted(self._dirty.get(name, ())):
                want, have = wanted.get(iface, Held()), held.get(iface, Held())
                if want == have:
                    continue
                key = f'"{_script_iface(iface)}"'
                if have.elements:
                    deleted.append(f"delete element {where} {name} {{ {key} }}")
                if want.elements:
                    target = nft_name(want.reaches)
                    added.append(f"add element {where} {name} {{ {key} : goto {target} }}")
                self._scripted[(name, iface)] = want
        # Deleted first: an interface moving to another chain is one of each.
        return deleted + added

    def declared(self) -> None:
        """The script is in the kernel: the sets it declares, and the verdict
        elements it wrote."""
        self._missing.clear()
        if self._held is None:
            self._scripted = {}
            return
        for (name, iface), want in self._scripted.items():
            if want.elements:
                self._held.setdefault(name, {})[iface] = want
            else:
                self._held.get(name, {}).pop(iface, None)
            self._dirty.get(name, set()).discard(iface)
        self._scripted = {}

    # --- programming ---------------------------------------------------------------

    @property
    def known(self) -> bool:
        return self._held is not None

    def forget(self) -> None:
        """Read the sets back before the next write (resync, tampering, cleanup)."""
        self._held = None

    async def read(self) -> None:
        """What the kernel holds of our sets (a worker reads them), and every
        interface compared at the next write."""
        self.reads += 1
        held, missing = await trio.to_thread.run_sync(self._read_all)
        self._held = held
        self._missing = missing  # what was read is what the kernel has
        for name in self._sets:
            self._dirty[name] = set(self._wanted[name]) | set(held.get(name, {}))

    def _read_all(self) -> tuple[dict[str, dict[str, Held]], set[str]]:
        held: dict[str, dict[str, Held]] = {}
        missing: set[str] = set()
        for name in self._sets:
            found: dict[str, tuple[set[bytes], str]] = {}
            try:
                for element in self._source.elements(self.family, self.table, name):
                    iface = element.key[:_IFNAMSIZ].rstrip(b"\0").decode(errors="replace")
                    items, reaches = found.setdefault(iface, (set(), ""))
                    items.add(element.encoded())
                    if element.verdict is not None:
                        reaches = element.verdict.chain
                    found[iface] = (items, reaches)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise
                missing.add(name)
            held[name] = {i: Held(frozenset(e), r) for i, (e, r) in found.items()}
        return held, missing

    def _differs(self, read: Mapping[str, Mapping[str, Held]]) -> bool:
        """Whether ``read`` (a read back) is not what was last written."""
        held = self._held or {}
        return any(read.get(name, {}) != held.get(name, {}) for name in self._sets)

    async def check(self) -> bool:
        """Read the sets back beside the applies; True (and read again
        before the next write) if they are not as written. A write while
        the read ran leaves the answer to the next check."""
        began = self.writes
        self.reads += 1
        read, missing = await trio.to_thread.run_sync(self._read_all)
        if self.writes != began or self._held is None:
            return False
        if missing or self._differs(read):
            self.forget()
            return True
        return False

    async def write(self) -> bool:
        """One element transaction for what differs; True if one was written.

        Raises:
            ProgrammingError: the kernel refused it (nothing of it was
                applied); the sets are read back before the next try.
        """
        if self._held is None:
            await self.read()
        assert self._held is not None
        changes: list[ElementChange] = []
        after: dict[str, dict[str, Held]] = {}
        for name, ifaces in self._dirty.items():
            wanted, held = self._wanted[name], self._held.setdefault(name, {})
            gone: list[bytes] = []
            new: list[bytes] = []
            for iface in ifaces:
                want, have = wanted.get(iface, Held()), held.get(iface, Held())
                gone += have.elements - want.elements
                new += want.elements - have.elements
                after.setdefault(name, {})[iface] = want
            # Deleted first: an interface's element replaced in one
            # transaction (a map's value cannot be replaced in place).
            if gone:
                changes.append(ElementChange("delete", self.family, self.table, name, tuple(gone)))
            if new:
                changes.append(ElementChange("add", self.family, self.table, name, tuple(new)))
        self._dirty = {}
        if changes:
            try:
                await send(self._sink, changes)
            except OSError as exc:
                self.forget()
                self._missing |= set(self._sets)
                raise ProgrammingError(
                    f"nft refused the {self.table} interface elements: {exc}"
                ) from exc
            self.writes += 1
        for name, done in after.items():
            for iface, want in done.items():
                if want.elements:
                    self._held[name][iface] = want
                else:
                    self._held[name].pop(iface, None)
        return bool(changes)
