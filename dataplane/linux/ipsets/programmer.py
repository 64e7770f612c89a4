"""IPSetsProgrammer: makes the kernel's IP sets match the desired sets.

API model:
    The platform feeds desired state (``replace``, ``update_members``,
    ``remove``; cheap, no I/O) and then calls ``apply_updates`` before
    programming iptables and ``apply_deletions`` after, so a rule never
    references a set that does not exist yet or any more. Those two and
    ``cleanup_all`` are the only methods that run commands, all through the
    injected :class:`~dataplane.linux.kernel.cmd.CommandRunner`.

Kernel model:
    Each desired set is one kernel hash set per IP version (see
    :mod:`dataplane.linux.ipsets.names`), family inet/inet6, ``maxelem``
    ``max_size``; members are split by family and kept in the spelling
    ``ipset save`` prints (so comparing with a read-back is plain set
    arithmetic): hash:net drops a full-length prefix, and a /0, which
    hash:net refuses, becomes its two /1 halves (as Felix does).

Goals and invariants:
    - One ``ipset -exist restore`` per apply step. ``-exist`` makes every
      line idempotent (re-adding, deleting what is gone, destroying what is
      gone), so a retried batch is harmless.
    - A packet never sees a half-built set: a set that exists is rewritten
      by filling a temp set and ``swap``-ing it in; new sets are filled
      directly; member deltas are add/del lines. The kernel only swaps sets
      of the same type and family, and the type is part of the name
      (``ipsets.names``), so a set id that changes type is a new set and the
      old one goes with the stale sets. A set of our name with another
      type or family can then only be tampering: destroy + create, placed
      last in the batch (the kernel refuses to destroy a referenced set,
      and then that set alone is quarantined).
    - We trust a cache of what the kernel holds and write only deltas,
      reading the kernel (one ``ipset save``) only at start-up, when the
      platform asks (``mark_for_resync``) and after any failed write:
      ``ipset restore`` sends adds in batches, so a failed restore leaves
      an unknown part of the script applied. At its refresh timer the
      platform reads beside the applies instead (``refresh``): what
      differs is merged into the cache, except sets written after the
      read began, and the next apply repairs it without reading.
    - After a read every desired set is compared with what is there, so a
      restart adopts correct sets untouched and drift (a flushed set, a
      deleted member, a destroyed set) is repaired with the smallest change.
    - Only sets named with our prefixes are read, written or destroyed.
    - One set the kernel refuses (more members than ``maxelem``, a foreign
      set of another type in the way) never blocks the others: when a batch
      fails, each set is written alone, the refused ones are quarantined
      (the kernel keeps what it holds of them) and retried alone with
      backoff until they are replaced, removed or accepted.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

import trio

from dataplane.core.quarantine import Quarantine
from dataplane.errors import ProgrammingError
from dataplane.linux.ipsets.batch import RestoreBatch
from dataplane.linux.ipsets.members import WantedSet
from dataplane.linux.ipsets.names import is_owned, temp_name
from dataplane.linux.ipsets.save import KernelSet, SetMeta, parse_save
from dataplane.linux.kernel.cmd import CommandRunner, output_lines
from dataplane.linux.kernel.written import Writes
from dataplane.model import IPSet, IPSetType

__all__ = ["IPSetsProgrammer"]

log = logging.getLogger(__name__)

_TYPE_NAMES = {
    IPSetType.IP: "hash:ip",
    IPSetType.NET: "hash:net",
    IPSetType.IP_AND_PORT: "hash:ip,port",
}
_FAMILIES = {4: "inet", 6: "inet6"}


_LINE_NO = re.compile(rb"Error in line (\d+)")


class IPSetsProgrammer:
    """Desired IP sets in, the smallest batched ``ipset restore`` out.

    Args:
        runner: runs the ``ipset`` tool (in a namespace, or a fake).
        ipv6: also program IPv6 sets; when off, IPv6 members are ignored.
        max_size: ``maxelem`` of every set; more members than this fail.
    """

    def __init__(
        self,
        runner: CommandRunner,
        *,
        ipv6: bool = True,
        max_size: int = 1048576,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self._runner = runner
        self.quarantine: Quarantine[str] = Quarantine(clock)
        self._refusals: list[tuple[str, str]] = []
        self._versions = (4, 6) if ipv6 else (4,)
        self._metas = {
            (kind, v): SetMeta(type_name, _FAMILIES[v], max_size)
            for kind, type_name in _TYPE_NAMES.items()
            for v in self._versions
        }
        self._wanted: dict[str, WantedSet] = {}
        self._rewrite: set[str] = set()  # given whole since the last successful apply
        self._dirty: set[str] = set()  # given deltas since then
        # What we believe the kernel holds for our names; None: not known,
        # read it before the next write.
        self._kernel: dict[str, KernelSet] | None = None
        self._check_all = True  # the cache was read but not yet compared with everything
        # Restores that succeeded, and which one last wrote each kernel set:
        # a refresh never takes back what was written after its read began.
        self._writes: Writes[str] = Writes()

    # -- desired state (no I/O) ---------------------------------------------

    def replace(self, ipset: IPSet) -> None:
        """Desired state of the set is exactly ``ipset``."""
        self.quarantine.release(ipset.id)
        self._wanted[ipset.id] = WantedSet(ipset, self._versions)
        self._rewrite.add(ipset.id)

    def update_members(self, set_id: str, added: frozenset[str], removed: frozenset[str]) -> None:
        """Remove then add members of a set given to :meth:`replace` before."""
        wanted = self._wanted.get(set_id)
        if wanted is None:
            raise KeyError(f"IP set {set_id!r}: member update for a set never replaced")
        wanted.discard(removed)
        wanted.add(added)
        self.quarantine.release(set_id)
        self._dirty.add(set_id)

    def remove(self, set_id: str) -> None:
        """The set is no longer wanted; :meth:`apply_deletions` destroys it."""
        self._wanted.pop(set_id, None)
        self.quarantine.release(set_id)
        self._rewrite.discard(set_id)
        self._dirty.discard(set_id)

    def kernel_name(self, set_id: str, version: int) -> str:
        """The name rules use to match ``set_id``'s IPv``version`` members.

        It depends on the set's type (see ``ipsets.names``), so ask only
        after :meth:`replace`.
        """
        return self._wanted[set_id].names[version]

    def wants(self, set_id: str) -> bool:
        """Whether ``set_id`` is desired now (rules on an absent set match nothing)."""
        return set_id in self._wanted

    def counts(self) -> dict[int, int]:
        """Kernel sets desired per IP version (one per desired set and version)."""
        return dict.fromkeys(self._versions, len(self._wanted))

    def desired_ids(self) -> frozenset[str]:
        """Ids of every set currently desired (programmed or not yet)."""
        return frozenset(self._wanted)

    def mark_for_resync(self) -> None:
        """Distrust the cache: the next apply re-reads the kernel and repairs drift."""
        self._kernel = None

    async def refresh(self) -> bool:
        """Read our sets back beside the applies; True if something differs.

        The cache takes what was read (but for sets written after the read
        began: it may predate them) and the next apply compares every set
        with it, writing only what differs; applies may run meanwhile.
        """
        if self._kernel is None:
            return False  # the next apply reads anyway
        began = self._writes.count
        read = await self._saved()
        kernel = self._kernel
        if kernel is None:
            return False  # a write is under way or failed: the apply reads
        differs = bool(self._writes.merge(kernel, read, began))
        self._writes.settled(began)
        self._check_all |= differs
        return differs

    # -- programming ----------------------------------------------------------

    async def apply_updates(self) -> None:
        """Create new sets, rewrite replaced ones, apply member deltas."""
        kernel = await self._known_kernel()
        if self._check_all:
            ids = set(self._wanted)
        else:
            ids = (self._rewrite | self._dirty) & self._wanted.keys()
        # Quarantined sets wait for their retry (or a new desired value).
        due = set(self.quarantine.due())
        ids = {i for i in ids if i not in self.quarantine or i in due} | (due & self._wanted.keys())
        batch = RestoreBatch()
        for set_id in sorted(ids):  # sorted: sets go out in a stable order
            self._plan(batch, kernel, set_id)
        if batch:
            try:
                await self._restore(batch.script(), "update", batch.touched)
            except ProgrammingError:
                await self._isolate(sorted(ids))
            else:
                batch.commit(kernel)
                for set_id in due:
                    self.quarantine.release(set_id)
            log.debug(
                "ipsets: wrote %d sets in full, patched %d",
                len(batch.written),
                len(batch.patched),
            )
        self._rewrite.clear()
        self._dirty.clear()
        self._check_all = False

    async def _isolate(self, ids: list[str]) -> None:
        """Write each set alone; quarantine those the kernel refuses.

        Raises:
            ProgrammingError: every one of several sets failed (the tool,
                not a set, is at fault): nothing is quarantined and the apply
                fails whole. One set alone that fails is that set's fault:
                failing the apply for it would stall every other update.
        """
        failed: list[tuple[str, ProgrammingError]] = []
        tried = 0
        for set_id in ids:
            kernel = await self._known_kernel()
            batch = RestoreBatch()
            self._plan(batch, kernel, set_id)
            if not batch:
                continue
            tried += 1
            try:
                await self._restore(batch.script(), f"update of set {set_id!r}", batch.touched)
            except ProgrammingError as exc:
                failed.append((set_id, exc))
            else:
                batch.commit(kernel)
                self.quarantine.release(set_id)
        if len(failed) > 1 and len(failed) == tried:
            raise failed[0][1]
        for set_id, error in failed:
            if self.quarantine.reject(set_id, str(error)):
                self._refusals.append((set_id, str(error)))

    def held_back(self) -> dict[str, str]:
        """IP sets (by id) in quarantine now, and the kernel's reason."""
        return self.quarantine.reasons()

    def take_refusals(self) -> list[tuple[str, str]]:
        """(set id, kernel's message) of sets newly quarantined since the last call."""
        refusals, self._refusals = self._refusals, []
        return refusals

    async def apply_deletions(self) -> None:
        """Destroy our sets that are no longer desired (and leftover temp sets).

        Call only once no rule references them: the kernel refuses to
        destroy a referenced set.
        """
        kernel = await self._known_kernel()
        wanted = {name for w in self._wanted.values() for name in w.names.values()}
        stale = sorted(name for name in kernel if name not in wanted)
        if not stale:
            return
        await self._restore("".join(f"destroy {name}\n" for name in stale), "delete", stale)
        for name in stale:
            del kernel[name]

    async def cleanup_all(self) -> None:
        """Destroy every set we own, whether desired or not; nothing else."""
        result = await self._runner.run(["ipset", "list", "-name"])
        names = result.stdout.decode(errors="replace").splitlines()
        owned = sorted({name.strip() for name in names if is_owned(name.strip())})
        if owned:
            await self._restore("".join(f"destroy {name}\n" for name in owned), "cleanup", owned)
        self._kernel = {}
        self._check_all = True  # desired sets, if any, are all missing now

    # -- internals ---------------------------------------------------------------

    def _plan(self, batch: RestoreBatch, kernel: dict[str, KernelSet], set_id: str) -> None:
        wanted = self._wanted[set_id]
        for v in self._versions:
            name = wanted.names[v]
            meta = self._metas[wanted.type, v]
            members = wanted.kernel[v]
            have = kernel.get(name)
            if have is None:
                batch.create(name, meta, members)
            elif (have.meta.type, have.meta.family) != (meta.type, meta.family):
                batch.recreate(name, meta, members)  # swap refuses a type change
            elif have.meta != meta or (set_id in self._rewrite and have.members != members):
                temp = temp_name(set_id, v)
                batch.swap(name, temp, meta, members, temp_exists=temp in kernel)
            else:
                gone, new = have.members - members, members - have.members
                if gone or new:
                    batch.patch(name, have, gone, new)

    async def _known_kernel(self) -> dict[str, KernelSet]:
        if self._kernel is None:
            self._kernel = await self._saved()
            self._check_all = True
            log.debug("ipsets: read %d sets of ours from the kernel", len(self._kernel))
        return self._kernel

    async def _saved(self) -> dict[str, KernelSet]:
        result = await self._runner.run(["ipset", "save"])
        # Hundreds of thousands of members at scale: parsed off the loop.
        return await trio.to_thread.run_sync(_owned_sets, result.stdout)

    async def _restore(self, script: str, what: str, touched: Iterable[str]) -> None:
        # Until the tool reports success, an unknown part of the script may
        # have gone through (it also commits adds in batches, so even the
        # failing line number does not say how much): forget the cache, so
        # the next apply reads the kernel. This also covers cancellation.
        # Desired state is untouched, ready for the retry.
        kernel, self._kernel = self._kernel, None
        result = await self._runner.run(
            ["ipset", "-exist", "restore"], stdin=script.encode(), check=False
        )
        if result.returncode == 0:
            self._kernel = kernel
            self._writes.wrote(touched)
            return
        stderr = result.stderr.decode(errors="replace").strip().replace("\n", " | ")
        where = ""
        found = _LINE_NO.search(result.stderr)
        if found is not None:
            number = int(found.group(1))
            lines = script.splitlines()
            if 0 < number <= len(lines):
                where = f" at line {number} ({lines[number - 1][:120]!r})"
        raise ProgrammingError(
            f"ipset restore ({what}) failed{where}: exit {result.returncode}: {stderr[:500]}"
        )


def _owned_sets(saved: bytes) -> dict[str, KernelSet]:
    """Our sets in ``ipset save`` output."""
    return parse_save(output_lines(saved), is_owned)
