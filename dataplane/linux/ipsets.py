"""IPSetsProgrammer: makes the kernel's IP sets match the desired sets.

API model:
    The platform feeds desired state (``replace``, ``update_members``,
    ``remove``; cheap, no I/O) and then calls ``apply_updates`` before
    programming iptables and ``apply_deletions`` after, so a rule never
    references a set that does not exist yet or any more. Those two and
    ``cleanup_all`` are the only methods that run commands, all through the
    injected :class:`~dataplane.linux.cmd.CommandRunner`.

Kernel model:
    Each desired set is one kernel hash set per IP version (see
    :mod:`dataplane.linux.ipset_names`), family inet/inet6, ``maxelem``
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
      (``ipset_names``), so a set id that changes type is a new set and the
      old one goes with the stale sets. A set of our name with another
      type or family can then only be tampering: destroy + create, placed
      last in the batch (the kernel refuses to destroy a referenced set,
      and then that set alone is quarantined).
    - We trust a cache of what the kernel holds and write only deltas,
      reading the kernel (one ``ipset save``) only at start-up, when the
      platform asks (``mark_for_resync``, its refresh timer) and after any
      failed write: ``ipset restore`` sends adds in batches, so a failed
      restore leaves an unknown part of the script applied.
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
from dataclasses import dataclass

import trio

from dataplane.core.quarantine import Quarantine
from dataplane.errors import ProgrammingError
from dataplane.linux.cmd import CommandRunner
from dataplane.linux.ipset_names import is_owned, main_name, temp_name
from dataplane.model import IPSet, IPSetType

__all__ = ["IPSetsProgrammer", "KernelSet", "SetMeta", "parse_save"]

log = logging.getLogger(__name__)

_TYPE_NAMES = {
    IPSetType.IP: "hash:ip",
    IPSetType.NET: "hash:net",
    IPSetType.IP_AND_PORT: "hash:ip,port",
}
_FAMILIES = {4: "inet", 6: "inet6"}
_DEFAULT_MAXELEM = 65536  # what the kernel uses when create names none


# ---------------------------------------------------------------------------
# Reading the kernel: `ipset save` output.
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SetMeta:
    """What a set is, as opposed to what it holds.

    ``extras`` are header options we never ask for (timeout, counters,
    comment, ...): a set carrying them is not the set we want.
    """

    type: str
    family: str
    maxelem: int
    extras: tuple[str, ...] = ()

    def create_line(self, name: str) -> str:
        return f"create {name} {self.type} family {self.family} maxelem {self.maxelem}"


@dataclass(slots=True)
class KernelSet:
    meta: SetMeta
    members: set[str]


# Header options followed by a value; every other header word is a flag.
_VALUED = frozenset(
    {"family", "hashsize", "maxelem", "bucketsize", "initval"}
    | {"timeout", "netmask", "bitmask", "markmask", "range", "size"}
)
# Options that do not change what a set matches: the kernel grows hashsize
# by itself, and bucketsize/initval are tuning.
_NEUTRAL = frozenset({"family", "hashsize", "maxelem", "bucketsize", "initval"})


def _parse_header(set_type: str, words: list[str]) -> SetMeta:
    family, maxelem, extras = "inet", _DEFAULT_MAXELEM, []
    i = 0
    while i < len(words):
        key = words[i]
        if key in _VALUED and i + 1 < len(words):
            value = words[i + 1]
            i += 2
            if key == "family":
                family = value
            elif key == "maxelem":
                # Unparseable: -1 never equals what we want, so it is rewritten.
                maxelem = int(value) if value.isdigit() else -1
            elif key not in _NEUTRAL:
                extras.append(f"{key} {value}")
        else:
            extras.append(key)
            i += 1
    return SetMeta(set_type, family, maxelem, tuple(sorted(extras)))


def parse_save(text: str, want: Callable[[str], bool] = lambda _name: True) -> dict[str, KernelSet]:
    """Parse ``ipset save`` output into sets, keeping those ``want`` accepts.

    Tolerant of what the tool may print around the data: blank lines,
    comments, ``COMMIT``, per-member options (``timeout 0 comment "x y"``)
    and unknown lines are skipped; members of an unknown set are dropped.
    """
    sets: dict[str, KernelSet] = {}
    for line in text.splitlines():
        # At most 4 words: a member's options (a long comment) are not split.
        words = line.split(maxsplit=3)
        if len(words) < 3:
            continue
        verb, name = words[0], words[1]
        if verb == "add":
            found = sets.get(name)
            if found is not None:
                found.members.add(words[2])
        elif verb == "create" and want(name):
            options = words[3].split() if len(words) == 4 else []
            sets[name] = KernelSet(_parse_header(words[2], options), set())
    return sets


# ---------------------------------------------------------------------------
# Desired members, split by family, in the kernel's spelling.
# ---------------------------------------------------------------------------

_HOST_LEN = {4: "32", 6: "128"}
_ZERO = {4: "0.0.0.0/0", 6: "::/0"}
_HALVES = {4: ("0.0.0.0/1", "128.0.0.0/1"), 6: ("::/1", "8000::/1")}


def _version(member: str) -> int:
    # "10.0.0.1,tcp:80" has a colon too: look at the address part only.
    return 6 if ":" in member.partition(",")[0] else 4


def _net_forms(member: str, version: int) -> tuple[str, ...]:
    address, _, length = member.partition("/")
    if not length or length == _HOST_LEN[version]:
        return (address,)
    if length == "0":
        return _HALVES[version]
    return (member,)


class _Wanted:
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
            bucket = self.members.get(_version(member))
            if bucket is not None:  # None: an IPv6 member with IPv6 off
                bucket.add(member)
        self.kernel = self.members
        if ipset.type is IPSetType.NET:
            self.kernel = {
                v: {form for m in ms for form in _net_forms(m, v)} for v, ms in self.members.items()
            }

    def add(self, added: Iterable[str]) -> None:
        for member in added:
            v = _version(member)
            bucket = self.members.get(v)
            if bucket is None:
                continue
            bucket.add(member)
            if self.kernel is not self.members:
                self.kernel[v].update(_net_forms(member, v))

    def discard(self, removed: Iterable[str]) -> None:
        for member in removed:
            v = _version(member)
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


# ---------------------------------------------------------------------------
# One restore batch.
# ---------------------------------------------------------------------------


class _Batch:
    """The lines of one ``ipset restore`` and what the kernel holds after it."""

    def __init__(self) -> None:
        self.creates: list[str] = []
        self.swaps: list[str] = []
        self.deltas: list[str] = []
        self.recreates: list[str] = []  # last: destroying a referenced set fails
        self.written: list[tuple[str, SetMeta, set[str]]] = []
        self.patched: list[tuple[KernelSet, set[str], set[str]]] = []
        self.destroyed: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.written or self.patched or self.destroyed)

    def create(self, name: str, meta: SetMeta, members: set[str]) -> None:
        self.creates.append(meta.create_line(name))
        self.creates.extend([f"add {name} {m}" for m in members])
        self.written.append((name, meta, members))

    def swap(
        self, name: str, temp: str, meta: SetMeta, members: set[str], *, temp_exists: bool
    ) -> None:
        lines = self.swaps
        if temp_exists:  # a leftover from an interrupted rewrite: start empty
            lines.append(f"destroy {temp}")
        lines.append(meta.create_line(temp))
        lines.extend([f"add {temp} {m}" for m in members])
        lines.append(f"swap {temp} {name}")
        lines.append(f"destroy {temp}")
        self.written.append((name, meta, members))
        self.destroyed.append(temp)

    def patch(self, name: str, have: KernelSet, gone: set[str], new: set[str]) -> None:
        # Deletions first, so a set near maxelem has room for the additions.
        self.deltas.extend([f"del {name} {m}" for m in gone])
        self.deltas.extend([f"add {name} {m}" for m in new])
        self.patched.append((have, gone, new))

    def recreate(self, name: str, meta: SetMeta, members: set[str]) -> None:
        self.recreates.append(f"destroy {name}")
        self.recreates.append(meta.create_line(name))
        self.recreates.extend([f"add {name} {m}" for m in members])
        self.written.append((name, meta, members))

    def script(self) -> str:
        lines = [*self.creates, *self.swaps, *self.deltas, *self.recreates]
        return "\n".join(lines) + "\n"

    def commit(self, kernel: dict[str, KernelSet]) -> None:
        """Record in ``kernel`` (our cache) what the kernel holds after success."""
        for name in self.destroyed:
            kernel.pop(name, None)
        for name, meta, members in self.written:
            kernel[name] = KernelSet(meta, set(members))
        for have, gone, new in self.patched:
            have.members -= gone
            have.members |= new


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
        self._wanted: dict[str, _Wanted] = {}
        self._rewrite: set[str] = set()  # given whole since the last successful apply
        self._dirty: set[str] = set()  # given deltas since then
        # What we believe the kernel holds for our names; None: not known,
        # read it before the next write.
        self._kernel: dict[str, KernelSet] | None = None
        self._check_all = True  # the cache was read but not yet compared with everything

    # -- desired state (no I/O) ---------------------------------------------

    def replace(self, ipset: IPSet) -> None:
        """Desired state of the set is exactly ``ipset``."""
        self.quarantine.release(ipset.id)
        self._wanted[ipset.id] = _Wanted(ipset, self._versions)
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

        It depends on the set's type (see ``ipset_names``), so ask only
        after :meth:`replace`.
        """
        return self._wanted[set_id].names[version]

    def wants(self, set_id: str) -> bool:
        """Whether ``set_id`` is desired now (rules on an absent set match nothing)."""
        return set_id in self._wanted

    def desired_ids(self) -> frozenset[str]:
        """Ids of every set currently desired (programmed or not yet)."""
        return frozenset(self._wanted)

    def mark_for_resync(self) -> None:
        """Distrust the cache: the next apply re-reads the kernel and repairs drift."""
        self._kernel = None

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
        batch = _Batch()
        for set_id in sorted(ids):  # sorted: sets go out in a stable order
            self._plan(batch, kernel, set_id)
        if batch:
            try:
                await self._restore(batch.script(), "update")
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
            batch = _Batch()
            self._plan(batch, kernel, set_id)
            if not batch:
                continue
            tried += 1
            try:
                await self._restore(batch.script(), f"update of set {set_id!r}")
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
        await self._restore("".join(f"destroy {name}\n" for name in stale), "delete")
        for name in stale:
            del kernel[name]

    async def cleanup_all(self) -> None:
        """Destroy every set we own, whether desired or not; nothing else."""
        result = await self._runner.run(["ipset", "list", "-name"])
        names = result.stdout.decode(errors="replace").splitlines()
        owned = sorted({name.strip() for name in names if is_owned(name.strip())})
        if owned:
            await self._restore("".join(f"destroy {name}\n" for name in owned), "cleanup")
        self._kernel = {}
        self._check_all = True  # desired sets, if any, are all missing now

    # -- internals ---------------------------------------------------------------

    def _plan(self, batch: _Batch, kernel: dict[str, KernelSet], set_id: str) -> None:
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
            result = await self._runner.run(["ipset", "save"])
            self._kernel = parse_save(result.stdout.decode(errors="replace"), is_owned)
            self._check_all = True
            log.debug("ipsets: read %d sets of ours from the kernel", len(self._kernel))
        return self._kernel

    async def _restore(self, script: str, what: str) -> None:
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
