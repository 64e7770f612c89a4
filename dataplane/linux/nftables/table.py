"""One nft table of ours: desired chains in memory, changes written with ``nft -f``.

The nftables twin of ``iptables/table.py``. What we want lives here, in memory;
an apply writes one ``nft -f`` script -- one atomic transaction -- holding only
the chains that differ from what the kernel holds, so nothing is ever re-read
on the write path. What the kernel holds is learnt by reading our table back
(``nft -a list table``: our table only, never the ruleset, parsed in a worker
thread) at the first apply and at each resync: every rule carries its identity
in its comment (``cali:<hash>``, the hash covering the chain, the rule's text
and every rule before it, as in iptables), so a chain is compared by its list
of hashes, never by text nft prints back in its own canonical form. A flushed
chain, a deleted rule or a deleted table is therefore found and rewritten by
the next resync; a restart onto a table that is already right writes nothing.
:meth:`NftTable.refresh` does the same reading beside the applies, so a
periodic check never delays one.

Base chains (the hooks into the kernel's packet path) are chains of this
table too, declared with their hook; other tables are never touched.

Per-interface sets and maps (endpoint dispatch,
:mod:`~dataplane.linux.nftables.iface_data`) are declared in every script.
When a script runs, the verdict elements that changed go in it, after the
chains they reach and before the chains no element reaches any more are
deleted (one transaction, one validation of the table by the kernel); the
other elements, and all of them when no script is needed, go through the
element writer after it.

A chain nft refuses is quarantined (``docs/quarantine.md``): nft names the
script line it refused, the chain that line writes is set aside (the kernel
keeps its last good version, or a fail-closed ``drop``), the rest is written.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import trio

from dataplane.core.quarantine import Quarantine, Unsaid
from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import CommandRunner
from dataplane.linux.kernel.written import ReadsBesideApplies, Writes
from dataplane.linux.nftables.iface_data import InterfaceData
from dataplane.linux.nftables.listing import blame, listed_chains
from dataplane.linux.nftables.names import nft_name
from dataplane.linux.nftables.serialise import NftRule
from dataplane.linux.rules.chain import Chain
from dataplane.linux.rules.identity import HASH_TAG, chain_hashes
from dataplane.linux.rules.rule import Origin

__all__ = ["FAIL_CLOSED", "BaseChain", "NftScript", "NftTable", "rule_hashes"]

# In a chain's place while it is refused and the kernel has none of it.
FAIL_CLOSED = (NftRule("drop", "fail-closed: refused by nft"),)


def rule_hashes(chain: str, rules: Iterable[NftRule]) -> list[str]:
    """Position-dependent identities of a chain's rules, by their nft text."""
    return chain_hashes(chain, (rule.text for rule in rules))


@dataclass(frozen=True, slots=True)
class BaseChain:
    """A chain hooked into the packet path: ``spec`` as nft declares it
    (``type filter hook input priority filter``), and its rules."""

    name: str
    spec: str
    rules: tuple[NftRule, ...] = ()


Line = tuple[str, str | None]  # a script line, and the chain it writes (to blame)


@dataclass(frozen=True, slots=True)
class NftScript:
    """One table's transaction in two parts: ``head`` declares the table,
    its sets and chains and fills the chains holding an anonymous set;
    ``tail`` fills the rest, then elements and deletions. Scripts of
    several tables in one run go in as every head, then every tail: the
    kernel's walk to bind an anonymous set covers the transaction so far,
    the other tables' too."""

    head: tuple[Line, ...] = ()
    tail: tuple[Line, ...] = ()

    @property
    def lines(self) -> tuple[Line, ...]:
        return self.head + self.tail

    def __bool__(self) -> bool:
        return bool(self.head or self.tail)


def script_text(lines: Iterable[Line]) -> bytes:
    """Script lines as nft reads them."""
    return "".join(line + "\n" for line, _ in lines).encode()


class NftTable:
    """One table (``family`` ip or ip6) of our own chains; see the module doc."""

    def __init__(
        self,
        family: str,
        name: str,
        runner: CommandRunner,
        *,
        clock: Callable[[], float] = time.monotonic,
        fail_closed: tuple[NftRule, ...] = FAIL_CLOSED,
        data: InterfaceData | None = None,
    ) -> None:
        if family not in ("ip", "ip6"):
            raise ValueError(f"not an nft family we write: {family}")
        self.family = family
        self.name = nft_name(name)  # written into every script
        self._runner = runner
        # A chain nft refuses waits here, retried alone with backoff; the
        # kernel keeps its last good version, or holds ``fail_closed`` in
        # its place if it never had one (something may jump to it).
        self.quarantine: Quarantine[str] = Quarantine(clock)
        self._fail_closed = fail_closed
        self._unsaid: Unsaid[str] = Unsaid()
        self._desired: dict[str, tuple[NftRule, ...]] = {}
        self._hashes: dict[str, list[str]] = {}
        self._base: dict[str, BaseChain] = {}
        # What the kernel holds: chain -> rule hashes (None: a rule without our tag); None unread.
        self._actual: dict[str, list[str | None]] | None = None
        self._dirty: set[str] = set()
        # nft -f transactions, and which touched each chain last: a refresh
        # never takes back what it read before a write that came after.
        self._writes: Writes[str] = Writes()
        self._reads: ReadsBesideApplies[tuple[int, dict[str, list[str | None]]]] = (
            ReadsBesideApplies(self._take_read)
        )
        self._refused_rules: dict[str, int | None] = {}  # chain -> the rule nft named
        # The table's per-interface sets and maps (endpoint dispatch).
        self.data = data
        self.reads = 0  # read-backs of the table

    @property
    def writes(self) -> int:
        """nft -f transactions (observability, tests)."""
        return self._writes.count

    # --- desired state ---------------------------------------------------------

    def update_chain(self, chain: Chain[NftRule]) -> None:
        if self._desired.get(chain.name) == chain.rules:
            return
        self.quarantine.release(chain.name)  # a new version gets a fresh chance
        self._desired[chain.name] = chain.rules
        self._hashes[chain.name] = rule_hashes(chain.name, chain.rules)
        self._dirty.add(chain.name)

    def remove_chain(self, name: str) -> None:
        self.quarantine.release(name)
        if self._desired.pop(name, None) is not None:
            del self._hashes[name]
            self._dirty.add(name)

    def set_chains(self, chains: Iterable[Chain[NftRule]]) -> None:
        wanted = {c.name: c for c in chains}
        for name in [n for n in self._desired if n not in wanted]:
            self.remove_chain(name)
        for chain in wanted.values():
            self.update_chain(chain)

    def set_base_chain(self, chain: BaseChain) -> None:
        if self._base.get(chain.name) == chain:
            return
        self._base[chain.name] = chain
        self._hashes[chain.name] = rule_hashes(chain.name, chain.rules)
        self._dirty.add(chain.name)

    @property
    def runner(self) -> CommandRunner:
        return self._runner

    def mark_for_resync(self) -> None:
        """Read the table back at the next apply and repair what differs."""
        self._actual = None
        if self.data is not None:
            self.data.forget()

    async def refresh(self) -> bool:
        """Read the table back beside the applies; True if something differs
        (the next apply repairs it). Applies may run while this reads (it
        holds no lock, never writes); a chain written after the read began
        keeps what that write left: the read may predate it."""
        began = self.writes
        differs = self._reads.offer((began, await self._read()))
        if self.data is not None:
            differs |= await self.data.check()
        return differs

    def _take_read(self, began_read: tuple[int, dict[str, list[str | None]]]) -> bool:
        began, read = began_read
        if self._actual is None:
            self._actual = read
        else:
            actual = dict(self._actual)
            self._writes.merge(actual, read, began)
            self._actual = actual
        self._writes.settled(began)
        wanted = {
            **{n: self._hashes[n] for n in self._desired},
            **{n: self._hashes[n] for n in self._base},
        }
        differs = {
            n for n in set(self._actual) | set(wanted) if self._actual.get(n) != wanted.get(n)
        }
        self._dirty |= differs
        return bool(differs)

    # --- programming -------------------------------------------------------------

    async def _read(self) -> dict[str, list[str | None]]:
        self.reads += 1
        result = await self._runner.run(
            ["nft", "-a", "list", "table", self.family, self.name], check=False
        )
        if result.returncode != 0:
            return {}  # no table (yet, or deleted behind our back): all to write
        # A big table is megabytes of text: parsed off the loop.
        return await trio.to_thread.run_sync(listed_chains, result.stdout)

    def _rules(self, name: str) -> tuple[NftRule, ...] | None:
        base = self._base.get(name)
        return base.rules if base is not None else self._desired.get(name)

    def _written_rules(
        self, name: str, actual: Mapping[str, list[str | None]], trial: set[str]
    ) -> tuple[tuple[NftRule, ...], list[str]] | None:
        """What to write for ``name`` now (rules and their hashes), or None
        to leave the kernel's version: a quarantined chain (not on trial)
        keeps what the kernel holds, or gets the fail-closed rules if it
        holds nothing."""
        rules = self._rules(name)
        if rules is None:
            return None
        if name not in self.quarantine or name in trial:
            return rules, self._hashes[name]
        if name in actual:
            return None
        return self._fail_closed, rule_hashes(name, self._fail_closed)

    def script(
        self, actual: Mapping[str, list[str | None]], trial: set[str]
    ) -> tuple[NftScript, dict[str, list[str] | None]]:
        """The transaction for the dirty chains that differ -- each line with
        the chain it writes (to blame a refusal) -- and the rule hashes each
        chain will then hold (None: deleted)."""
        where = f"{self.family} {self.name}"
        declare: list[Line] = []
        fill: list[Line] = []
        # The chains whose rules hold an anonymous set (``{ 80, 443 }``)
        # are filled first: the kernel walks the whole transaction so far
        # to bind each one, and behind a 1,000-endpoint node's 33,000
        # workload rules those walks cost its commit about 0.4 s
        # (docs/nftables.md). Each chain's lines stay in order, and every
        # chain is declared before any is filled.
        early: list[Line] = []
        rewritten: dict[str, list[str] | None] = {}
        stale: list[str] = []
        for name in sorted(self._dirty):
            if self._rules(name) is None:
                if name in actual:
                    stale.append(name)
                continue
            written = self._written_rules(name, actual, trial)
            if written is None or actual.get(name) == written[1]:
                continue
            rules, hashes = written
            base = self._base.get(name)
            spec = f" {{ {base.spec}; }}" if base is not None else ""
            rewritten[name] = hashes
            declare.append((f"add chain {where} {name}{spec}", name))
            into = early if any("{" in rule.text for rule in rules) else fill
            if name in actual:
                into.append((f"flush chain {where} {name}", name))
            into.extend(
                (f"add rule {where} {name} {rule.written(HASH_TAG + h)}", name)
                for rule, h in zip(rules, hashes, strict=True)
            )
        sets: list[Line] = []
        elements: list[Line] = []
        missing = False  # a set of ours the kernel may lack: a script declares it
        if self.data is not None:
            sets = [(line, None) for line in self.data.declarations(where)]
            # Verdict elements ride along when a script runs anyway.
            running = where if (declare or fill or stale) else None
            elements = [(line, None) for line in self.data.script_verdicts(running)]
            missing = self.data.missing
        # Flush every stale chain before deleting any: one may jump to another.
        drop: list[Line] = [(f"flush chain {where} {n}", n) for n in stale]
        drop += [(f"delete chain {where} {n}", n) for n in stale]
        if not (declare or drop or missing):
            return NftScript(), {}
        # The sets before the chains whose rules look them up.
        head = ((f"add table {where}", None), *sets, *declare, *early)
        script = NftScript(head, (*fill, *elements, *drop))
        return script, {**rewritten, **dict.fromkeys(stale)}

    async def apply(self) -> bool:
        """Write what differs in one transaction; True if anything was written.

        Raises:
            ProgrammingError: nft refused the transaction (nothing of it
                was applied: a transaction is all or nothing).
        """
        return await self.while_applying(self.apply_alone)

    async def while_applying(self, apply: Callable[[], Awaitable[bool]]) -> bool:
        """Run ``apply`` (this table's, or a transaction with it); a refresh
        read that comes back meanwhile waits for its end."""
        return await self._reads.apply(apply)

    async def apply_alone(self) -> bool:
        """As :meth:`apply`, inside :meth:`while_applying`."""
        wrote = await self._apply_chains()
        return await self.apply_data() or wrote

    async def apply_data(self) -> bool:
        """The interface elements the script did not carry (all of them
        when no script ran), once the chains they reach exist. True if
        anything was written."""
        if self.data is None:
            return False
        return await self.data.write()

    async def _apply_chains(self) -> bool:
        actual, trial = await self.begin()
        while True:
            script, written = self.script(actual, trial)
            if not script:
                self.settle()
                return False
            text = script_text(script.lines)
            result = await self._runner.run(["nft", "-f", "-"], stdin=text, check=False)
            if result.returncode == 0:
                break
            self._refused(result.stderr, script.lines, trial)
        self.wrote(written, trial)
        return True

    async def begin(self) -> tuple[dict[str, list[str | None]], set[str]]:
        """Ready for an apply: what the kernel holds (read if not known),
        and the refused chains whose retry is due (they go in as wanted)."""
        if self._actual is None:
            self._actual = await self._read()
            # Fresh knowledge of the kernel: compare every chain to it, and
            # notice chains of our table that nobody wants.
            self._dirty |= set(self._desired) | set(self._base) | set(self._actual)
        if self.data is not None and not self.data.known:
            await self.data.read()
        trial = {n for n in self.quarantine.due() if n in self._desired}
        self._dirty |= trial
        return self._actual, trial

    def settle(self) -> None:
        """Nothing differed from the kernel: no chain waits to be compared."""
        self._dirty.clear()

    def _refused(self, stderr: bytes, script: Sequence[Line], trial: set[str]) -> None:
        """nft refused ``script``: quarantine the chain whose line it names
        (refused again, a trial goes back with a longer wait), so that the
        next try writes the rest.

        Raises:
            ProgrammingError: a refusal not pinned on one of our chains (a
                base chain, no line): the apply fails as a whole.
        """
        message, chain, rule = blame(stderr, script)
        set_aside = chain in self.quarantine and chain not in trial
        if chain is None or chain in self._base or set_aside:
            self._actual = None  # read again before the next try
            if self.data is not None:
                self.data.forget()
            raise ProgrammingError(
                f"nft refused the {self.family} {self.name} transaction: {message}"
            )
        self.quarantine.reject(chain, message)
        self._refused_rules[chain] = rule
        trial.discard(chain)

    def wrote(self, written: Mapping[str, list[str] | None], trial: set[str]) -> None:
        """The transaction holding ``written`` is in the kernel."""
        for name in trial:
            self.quarantine.release(name)  # written as wanted: accepted
        self._writes.wrote(written)
        assert self._actual is not None  # known since begin; only a raise forgets it
        for name, hashes in written.items():
            if hashes is None:
                self._actual.pop(name, None)
            else:
                self._actual[name] = list(hashes)
        self._dirty.clear()
        if self.data is not None:
            self.data.declared()  # every script declares the sets

    def origin(self, name: str, index: int | None) -> Origin | None:
        """Where rule ``index`` of desired chain ``name`` came from, if known."""
        rules = self._desired.get(name, ())
        if index is None or not 0 <= index < len(rules):
            return None
        return rules[index].origin

    def desired(self, name: str) -> tuple[tuple[NftRule, ...], Sequence[str]] | None:
        """Chain ``name``'s desired rules and their hash comments; None if not desired."""
        rules = self._desired.get(name)
        return None if rules is None else (rules, self._hashes[name])

    def keeps_last_good(self, name: str) -> bool:
        """Whether quarantined chain ``name`` runs its last good version
        (else the fail-closed rules, or nothing yet)."""
        held = (self._actual or {}).get(name)
        return held is not None and held != rule_hashes(name, self._fail_closed)

    def refused_rule(self, name: str) -> int | None:
        """Which rule of chain ``name`` nft refused last (None: not known)."""
        return self._refused_rules.get(name)

    def snapshot(self) -> dict[str, tuple[NftRule, ...]]:
        """Desired chains, base chains among them (for dumps and tests)."""
        return {**self._desired, **{n: b.rules for n, b in self._base.items()}}

    def held_back(self) -> dict[str, str]:
        """Chains in quarantine now, and nft's reason."""
        return self.quarantine.reasons()

    def take_refusals(self) -> list[tuple[str, str]]:
        """(chain, why) newly quarantined since the last call: one report each."""
        return self._unsaid.news(self.held_back())

    async def cleanup(self) -> None:
        """Delete the whole table (ours alone); nothing else is touched."""
        await self._runner.run(["nft", "delete", "table", self.family, self.name], check=False)
        self._actual = None
        self._dirty = set(self._desired) | set(self._base)
        if self.data is not None:
            self.data.forget()
