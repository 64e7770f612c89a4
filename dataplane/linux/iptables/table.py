"""Table: desired chains of one iptables table (one IP version) -> kernel.

After Felix's ``table.go``: the table caches what it believes the kernel
holds (per chain, the list of our rule hashes), so an apply writes only the
chains whose hashes differ, in one atomic ``iptables-restore --noflush``.
The cache is rebuilt from ``iptables-save`` at start (adopting what a
previous run left) and after any failed write. Tampering (someone flushing
one of our chains) is found by :meth:`Table.refresh`, which the platform
runs beside the applies when its refresh timer fires: it reads the table
back, marks what differs and the next apply rewrites only that. Without
the platform's refresher, :meth:`Table.mark_for_resync` makes the next
apply read instead.

Ownership: every chain whose name starts with our prefix, and every rule in
a kernel (built-in) chain that carries our hash comment. Nothing else is
ever written or removed.

Ordering inside one restore: declare (create or flush) every chain we
rewrite, flush stale chains, write rules, fix hook rules in built-in
chains, and only then delete stale chains, so no reference ever dangles.

Fault isolation: when a restore fails, the table asks the kernel's parser
which of the chains it was writing are refused on their own
(:mod:`~dataplane.linux.iptables.chain_check`), quarantines those and writes the rest
at once. A quarantined chain keeps the version the kernel already holds
(its last good one) or, if it has none, is written fail-closed (the
``fail_closed`` rules: DROP by default) so that nothing that jumps to it is
left open. It is retried on its own, with backoff, until it passes, changes
or goes away.

Large loads: iptables-nft-restore slows quadratically with the number of
chains declared in one transaction (5,000 services are ~55,000 chains:
85 s in one go, ~2 s in batches). A chain that does not exist yet is
unreachable until some rule jumps to it, so when an apply creates many
chains they are preloaded first, leaves first, in batches (on
iptables-nft: iptables-legacy replaces the whole table at each restore, so
there one restore is the quickest); the final
restore -- everything that changes an existing chain, the hooks and the
deletions -- is still one atomic transaction, so no packet ever sees a
half-written policy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

import trio

from dataplane.core.quarantine import Quarantine
from dataplane.errors import ProgrammingError
from dataplane.linux.iptables.backend import IptablesCommands
from dataplane.linux.iptables.chain_check import ChainChecker, RefusedChain
from dataplane.linux.iptables.chain_order import leaves_first
from dataplane.linux.iptables.chains import (
    IptChain,
    IptRule,
    render_rule,
    rule_hashes,
)
from dataplane.linux.iptables.held_back import HeldBack
from dataplane.linux.iptables.saved import hook_lines, saved_chains
from dataplane.linux.kernel.cmd import CommandRunner
from dataplane.linux.kernel.written import ReadsBesideApplies, Writes
from dataplane.linux.rules.rule import Origin

__all__ = ["FAIL_CLOSED", "Table"]

PRELOAD_THRESHOLD = 2000  # new chains in one apply beyond which they are preloaded
PRELOAD_BATCH = 2000  # chains per preload restore
# Chains blamed one by one for commit-time refusals in one apply before
# the table gives up and the whole apply is retried.
_MAX_BLAMES = 8

log = logging.getLogger(__name__)

FAIL_CLOSED = (IptRule("", "-j DROP"),)

# A refresh's read: the write count and resync count when it began, our
# chains' rule hashes and our hook rules (see saved_chains).
_Read = tuple[int, int, dict[str, list[str | None]], dict[str, list[tuple[str | None, str]]]]


class Table(HeldBack):
    def __init__(
        self,
        name: str,
        version: int,
        runner: CommandRunner,
        commands: IptablesCommands,
        *,
        prefix: str = "cali-",
        insert_mode: str = "insert",
        preload_threshold: int = PRELOAD_THRESHOLD,
        preload_batch: int = PRELOAD_BATCH,
        fail_closed: tuple[IptRule, ...] = FAIL_CLOSED,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.name = name
        self.version = version
        self._runner = runner
        self._commands = commands
        self.prefix = prefix
        self.insert_mode = insert_mode
        self.preload_threshold = preload_threshold
        self.preload_batch = preload_batch
        self._desired: dict[str, tuple[IptRule, ...]] = {}
        self._hashes: dict[str, list[str]] = {}  # of desired chains, computed once
        self.rule_count = 0  # rules in the desired chains, kept as they change (metrics)
        # Chains whose desired rules changed since take_changed(); None while
        # nobody asks (the policy counters' labels do).
        self._changed: set[str] | None = None
        self._dirty: set[str] = set()  # chains to compare at the next apply
        self._hooks: dict[str, tuple[IptRule, ...]] = {}
        # What we believe the kernel holds: our chains' hashes, and our rule
        # lines in built-in chains (kept verbatim for -D). None: unknown.
        self._actual_chains: dict[str, list[str | None]] | None = None
        self._actual_hooks: dict[str, list[tuple[str | None, str]]] = {}
        # Restores run, and which wrote each chain and built-in chain's hooks
        # last; reads of the whole table by an apply: a refresh never takes
        # back what was written or read after it began.
        self._writes: Writes[str] = Writes()
        self._resyncs = 0
        self._reads: ReadsBesideApplies[_Read] = ReadsBesideApplies(self._take_read)
        self.fail_closed = fail_closed
        self._fail_closed_hashes: dict[str, list[str]] = {}
        # Chains the kernel refused, held back; and the refusals not yet
        # reported (the platform names the objects they belong to).
        self.quarantine: Quarantine[str] = Quarantine(clock)
        self._refusals: list[RefusedChain] = []
        self._last_input: list[str] = []  # of the last restore, to blame a line
        self._checker = ChainChecker(name, commands.restore, runner, prefix)

    def __repr__(self) -> str:
        return f"Table({self.name}, v{self.version})"

    @property
    def writes(self) -> int:
        """Restores run (observability, tests)."""
        return self._writes.count

    # --- desired state --------------------------------------------------------

    def update_chain(self, chain: IptChain) -> None:
        if not chain.name.startswith(self.prefix):
            raise ValueError(f"chain {chain.name} lacks our prefix {self.prefix}")
        old = self._desired.get(chain.name)
        if old == chain.rules:
            return
        hashes = rule_hashes(chain.name, chain.rules)
        self._desired[chain.name] = chain.rules
        if self._changed is not None:
            self._changed.add(chain.name)
        if old is not None and hashes == self._hashes[chain.name]:
            return  # the same rules from other origins: nothing for the kernel
        self.quarantine.release(chain.name)  # a new version gets a fresh chance
        self.rule_count += len(chain.rules) - len(old or ())
        self._hashes[chain.name] = hashes
        self._dirty.add(chain.name)

    def remove_chain(self, name: str) -> None:
        self.quarantine.release(name)
        self._fail_closed_hashes.pop(name, None)  # chain names come and go with pods
        rules = self._desired.pop(name, None)
        if rules is not None:
            self.rule_count -= len(rules)
            del self._hashes[name]
            self._dirty.add(name)
            if self._changed is not None:
                self._changed.add(name)

    def set_chains(self, chains: Iterable[IptChain]) -> None:
        """Replace the whole desired set of chains."""
        wanted = {c.name: c for c in chains}
        for name in [n for n in self._desired if n not in wanted]:
            self.remove_chain(name)
        for chain in wanted.values():
            self.update_chain(chain)

    def set_hooks(self, builtin: str, rules: Sequence[IptRule]) -> None:
        """Our rules at the top (insert mode) or bottom of a built-in chain."""
        self._hooks[builtin] = tuple(rules)

    def desired_chain_names(self) -> frozenset[str]:
        return frozenset(self._desired)

    def take_changed(self) -> set[str]:
        """Chains whose desired rules changed since the last call (every desired
        chain at the first call: tracking starts then)."""
        if self._changed is None:
            self._changed = set()
            return set(self._desired)
        changed, self._changed = self._changed, set()
        return changed

    def chain_count(self) -> int:
        """How many chains are desired (metrics)."""
        return len(self._desired)

    def desired(self, name: str) -> tuple[tuple[IptRule, ...], Sequence[str]] | None:
        """Chain ``name``'s desired rules and their hash comments; None if not desired.

        The rules tuple is the very object the writer handed over, so a
        caller may cache on its identity.
        """
        rules = self._desired.get(name)
        return None if rules is None else (rules, self._hashes[name])

    def origin(self, name: str, index: int | None) -> Origin | None:
        """Where rule ``index`` of desired chain ``name`` came from, if known."""
        rules = self._desired.get(name, ())
        if index is None or not 0 <= index < len(rules):
            return None
        return rules[index].origin

    def mark_for_resync(self) -> None:
        self._actual_chains = None

    async def refresh(self) -> bool:
        """Read the table back beside the applies; True if something differs.

        What differs is repaired by the next apply; applies may run while
        this reads (it holds no lock and never writes). A chain written
        after the read began keeps what that write left: the read may
        predate it.
        """
        began, resyncs = self.writes, self._resyncs
        chains, hooks = await self._saved()
        return self._reads.offer((began, resyncs, chains, hooks))

    def _take_read(self, read: _Read) -> bool:
        began, resyncs, chains, hooks = read
        actual = self._actual_chains
        if actual is None or self._resyncs != resyncs:
            return False  # the apply reads (or has read, later than this) itself
        self._writes.merge(actual, chains, began)
        self._writes.merge(self._actual_hooks, hooks, began)
        self._writes.settled(began)
        differs = {n for n in set(self._desired) | set(actual) if self._differs(n)}
        self._dirty |= differs
        return bool(differs) or any(
            self._hooks_differ(b) for b in set(self._hooks) | set(self._actual_hooks)
        )

    def _hooks_differ(self, builtin: str) -> bool:
        """Whether the kernel's hook rules of ``builtin`` are not ours as wanted."""
        present = [h for h, _ in self._actual_hooks.get(builtin, [])]
        return present != rule_hashes(builtin, self._hooks.get(builtin, ()))

    def _differs(self, name: str) -> bool:
        """Whether the kernel's ``name`` is not what an apply would leave there."""
        assert self._actual_chains is not None
        if name not in self._desired:
            return name in self._actual_chains  # stale
        wanted = self._writable(name)
        return wanted is not None and self._actual_chains.get(name) != wanted[1]

    # --- programming --------------------------------------------------------------

    async def _saved(
        self,
    ) -> tuple[dict[str, list[str | None]], dict[str, list[tuple[str | None, str]]]]:
        result = await self._runner.run([*self._commands.save, "-t", self.name])
        # Tens of thousands of lines at scale: parsed in a worker thread, so
        # a read never holds the loop (it only waits for the answer).
        return await trio.to_thread.run_sync(saved_chains, self.name, self.prefix, result.stdout)

    async def _read(self) -> None:
        self._actual_chains, self._actual_hooks = await self._saved()
        self._resyncs += 1

    def _restore_input(self) -> list[str]:
        assert self._actual_chains is not None
        actual = self._actual_chains
        declare: list[str] = []
        rules: list[str] = []
        for name in sorted(self._dirty):
            wanted = self._writable(name)
            if wanted is None:
                continue
            desired, hashes = wanted
            if actual.get(name) == hashes:
                continue
            declare.append(f":{name} - [0:0]")
            rules.extend(render_rule(name, r, h) for r, h in zip(desired, hashes, strict=True))
        stale = sorted(name for name in self._dirty if name in actual and name not in self._desired)
        flush = [f"-F {name}" for name in stale]
        delete = [f"-X {name}" for name in stale]
        hooks: list[str] = []
        for builtin in sorted(set(self._hooks) | set(self._actual_hooks)):
            if self._hooks_differ(builtin):
                held = self._actual_hooks.get(builtin, [])
                ours = self._hooks.get(builtin, ())
                hooks += hook_lines(builtin, held, ours, insert=self.insert_mode == "insert")
        body = declare + flush + rules + hooks + delete
        if not body:
            return []
        return [f"*{self.name}", *body, "COMMIT", ""]

    def _preload_order(self) -> list[str]:
        """New chains to create ahead of the final restore, leaves first."""
        actual = self._actual_chains
        assert actual is not None
        new = {
            n
            for n in self._dirty
            if n in self._desired and n not in actual and n not in self.quarantine
        }
        if len(new) <= self.preload_threshold:
            return []
        return leaves_first(new, self._desired)

    async def _restore(self, lines: list[str]) -> None:
        self._last_input = lines
        try:
            await self._runner.run(self._commands.restore, stdin="\n".join(lines).encode())
        except ProgrammingError as exc:
            self.mark_for_resync()
            raise ProgrammingError(f"iptables v{self.version} table {self.name}: {exc}") from exc
        self._writes.wrote()

    async def _preload(self) -> None:
        actual = self._actual_chains
        assert actual is not None
        order = self._preload_order()
        for start in range(0, len(order), self.preload_batch):
            batch = order[start : start + self.preload_batch]
            lines = [f"*{self.name}", *(f":{name} - [0:0]" for name in batch)]
            for name in batch:
                pairs = zip(self._desired[name], self._hashes[name], strict=True)
                lines.extend(render_rule(name, r, h) for r, h in pairs)
            await self._restore([*lines, "COMMIT", ""])
            for name in batch:
                actual[name] = list(self._hashes[name])
            self._writes.touched(batch)

    async def apply(self) -> bool:
        """Bring the kernel to the desired state; True if anything was written.

        Chains the kernel refuses are quarantined (see the module header)
        and everything else is written in the same call; only a failure no
        chain explains raises :class:`ProgrammingError`.
        """
        return await self._reads.apply(self._apply)

    async def _apply(self) -> bool:
        if self._actual_chains is None:
            await self._resync()
        writes = self.writes
        await self._retry_quarantined()
        for attempt in range(_MAX_BLAMES + 1):
            try:
                await self._write()
                break
            except ProgrammingError as exc:
                # Nothing of the failed restore was written (it is atomic),
                # but a preload batch before it may have been: read the kernel.
                failed_input = self._last_input
                await self._resync()
                if attempt == 0 and await self._isolate():
                    continue
                # What the parser passes but the commit refuses (nft checks
                # some things only in the kernel): blame the chain the
                # failing line belongs to, one per attempt.
                if attempt == _MAX_BLAMES or not self._blame(str(exc), failed_input):
                    raise
        return self.writes > writes

    async def _resync(self) -> None:
        await self._read()
        # Compare everything against what the kernel really holds, and
        # notice our chains that nobody wants any more.
        self._dirty = set(self._desired) | set(self._actual_chains or ())

    async def _write(self) -> None:
        await self._preload()
        lines = self._restore_input()
        if lines:
            await self._restore(lines)
        self._after_write()

    def _after_write(self) -> None:
        actual = self._actual_chains
        assert actual is not None
        for name in self._dirty:
            wanted = self._writable(name)
            if wanted is not None:
                actual[name] = list(wanted[1])
            elif name not in self._desired:
                actual.pop(name, None)
        self._writes.touched(self._dirty)
        # Quarantined chains stay dirty: the apply after their release
        # writes them.
        self._dirty = {n for n in self._dirty if n in self.quarantine}
        hooks: dict[str, list[tuple[str | None, str]]] = {}
        for builtin, rules in self._hooks.items():
            hashes = rule_hashes(builtin, rules)
            if rules:
                hooks[builtin] = [
                    (h, render_rule(builtin, r, h)) for r, h in zip(rules, hashes, strict=True)
                ]
        self._writes.touched(self._actual_hooks.keys() | hooks.keys())
        self._actual_hooks = hooks

    async def cleanup_all(self) -> None:
        """Remove every chain and hook rule we own from this table."""
        self.set_chains(())
        self._hooks = {}
        self.mark_for_resync()
        await self.apply()

    def snapshot(self) -> Mapping[str, tuple[IptRule, ...]]:
        """Desired chains (for dumps and tests)."""
        return dict(self._desired)
