"""Both families' tables in one ``nft -f``, fed while the IP sets are written.

Against the real kernel: one run for both families (each run fetches the
whole ruleset); a refusal is blamed per table; the reads go side by side.
What runs ``meanwhile`` (the IP sets' writes) runs once, after nft has
started and before it commits, and the rules find the sets it made; if
it fails, nothing of the script is written, and the next apply writes it
all.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
import trio

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import CommandResult, ProcessRunner
from dataplane.linux.kernel.fed import Fed, feeding
from dataplane.linux.nftables.serialise import NftRule, NftSerialiser
from dataplane.linux.nftables.table import NftTable
from dataplane.linux.nftables.together import apply_together
from dataplane.linux.rules.action import Drop, Jump
from dataplane.linux.rules.chain import Chain
from dataplane.linux.rules.rule import TableRule
from tests.linux.test_nft_table import TABLE, _desired, _rules, held


def _families(runner: ProcessRunner) -> tuple[NftTable, NftTable]:
    """Our table in both families, the ip6 one holding one chain."""
    v4, v6 = NftTable("ip", TABLE, runner), NftTable("ip6", TABLE, runner)
    v6.set_chains([Chain("cali-six", NftSerialiser(6).rules((TableRule((), Drop()),)))])
    return v4, v6


class CountingRunner(ProcessRunner):
    """The real tools, counting the ``nft -f`` runs (fed or not)."""

    def __init__(self, netns: str) -> None:
        super().__init__(netns)
        self.scripts = 0

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        self.scripts += list(argv[:2]) == ["nft", "-f"]
        return await super().run(argv, stdin=stdin, check=check)

    def feeding(self, argv: Sequence[str]) -> AbstractAsyncContextManager[Fed]:
        self.scripts += list(argv[:2]) == ["nft", "-f"]
        return feeding(ProcessRunner(self.netns), argv)


def test_both_families_go_in_one_nft_run_and_a_refusal_is_blamed_per_table(netns: str) -> None:
    """One ``nft -f`` for both families (each run fetches the whole
    ruleset first); refused, each table on its own finds its chain."""

    async def main() -> None:
        runner = CountingRunner(netns)
        v4 = NftTable("ip", TABLE, runner)
        v6 = NftTable("ip6", TABLE, runner)
        nft6 = NftSerialiser(6)
        _desired(v4)
        v6.set_chains([Chain("cali-six", nft6.rules((TableRule((), Drop()),)))])
        assert await apply_together([v4, v6])
        assert runner.scripts == 1
        assert "cali-six" in held(netns, "ip6") and "cali-root" in held(netns)
        assert not await apply_together([v4, v6])
        assert runner.scripts == 1  # nothing differs: no run

        v4.update_chain(Chain("cali-leaf-0", _rules(TableRule((), Drop()))))
        v6.update_chain(Chain("cali-bad", nft6.rules((TableRule((), Jump("cali-nowhere")),))))
        assert await apply_together([v4, v6])
        # The joint run refused; then ip alone, ip6 refused again and, its
        # chain to blame set aside, ip6 without it.
        assert runner.scripts == 1 + 1 + 1 + 2
        assert len(held(netns)["cali-leaf-0"]) == 1
        assert set(v6.held_back()) == {"cali-bad"} and v4.held_back() == {}

    trio.run(main)


class MeetingReads(ProcessRunner):
    """The real tools, each ``nft list`` held until every family's has begun."""

    def __init__(self, netns: str, families: int) -> None:
        super().__init__(netns)
        self.begun = 0
        self._families = families
        self._all_begun = trio.Event()

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        if "list" in argv:
            self.begun += 1
            if self.begun == self._families:
                self._all_begun.set()
            # In turn, the first read would wait here for the second forever.
            with trio.fail_after(10):
                await self._all_begun.wait()
        return await super().run(argv, stdin=stdin, check=check)


def test_both_families_tables_are_read_side_by_side(netns: str) -> None:
    """A restart reads both tables back before writing; on a loaded node
    each read is a ``nft -a list table`` of tens of thousands of rules
    (in turn about twice as long), so they run at once."""

    async def main() -> None:
        runner = MeetingReads(netns, 2)
        v4, v6 = _families(runner)
        _desired(v4)
        assert await apply_together([v4, v6])
        assert runner.begun == 2 and v4.reads == v6.reads == 1
        assert "cali-six" in held(netns, "ip6") and "cali-root" in held(netns)

    trio.run(main)


def _chains(netns: str, family: str = "ip") -> list[str]:
    """Our table's chains in the kernel ([] with no table)."""
    done = subprocess.run(
        ["ip", "netns", "exec", netns, "nft", "list", "table", family, TABLE],
        capture_output=True,
        text=True,
        check=False,
    )
    return [line.split()[1] for line in done.stdout.splitlines() if line.startswith("\tchain ")]


def _set_maker(
    netns: str, runner: CountingRunner, calls: list[list[str]]
) -> Callable[[], Awaitable[None]]:
    """A ``meanwhile`` that makes the set the rules look up, noting what
    the kernel held of our chains then and how many nft runs had begun."""

    async def make() -> None:
        calls.append([*_chains(netns), f"runs:{runner.scripts}"])
        script = f"add table ip {TABLE}\nadd set ip {TABLE} blocked {{ type ipv4_addr; }}\n"
        script += f"add element ip {TABLE} blocked {{ 192.0.2.7 }}\n"
        await trio.run_process(
            ["ip", "netns", "exec", netns, "nft", "-f", "-"], stdin=script.encode()
        )

    return make


def _looking_up(table: NftTable) -> None:
    table.set_chains([Chain("cali-blocked", (NftRule("ip saddr @blocked drop"),))])


def test_the_sets_made_meanwhile_are_found_by_the_rules_of_the_same_run(netns: str) -> None:
    async def main() -> None:
        runner = CountingRunner(netns)
        v4, v6 = _families(runner)
        _looking_up(v4)
        calls: list[list[str]] = []
        assert await apply_together([v4, v6], _set_maker(netns, runner, calls))
        # Once; nft had begun reading, and had committed nothing.
        assert calls == [["runs:1"]]
        assert runner.scripts == 1  # one run: the set was there when nft evaluated
        assert len(held(netns)["cali-blocked"]) == 1 and "cali-six" in held(netns, "ip6")

    trio.run(main)


def test_a_failure_meanwhile_writes_nothing_and_the_next_apply_writes_it_all(
    netns: str,
) -> None:
    async def refuse() -> None:
        raise ProgrammingError("the kernel refused every IP set")

    async def main() -> None:
        runner = CountingRunner(netns)
        v4, v6 = _families(runner)
        _desired(v4, width=200)
        with pytest.raises(ProgrammingError, match="IP set"):
            await apply_together([v4, v6], refuse)
        assert runner.scripts == 1  # nft had started, and was killed unfed
        assert _chains(netns) == [] and _chains(netns, "ip6") == []
        assert v4.writes == v6.writes == 0
        calls: list[list[str]] = []
        assert await apply_together([v4, v6], _set_maker(netns, runner, calls))
        assert len(calls) == 1
        assert len(held(netns)["cali-root"]) == 200 and "cali-six" in held(netns, "ip6")

    trio.run(main)


def test_with_nothing_to_write_the_sets_are_still_written_and_nft_never_runs(
    netns: str,
) -> None:
    async def main() -> None:
        runner = CountingRunner(netns)
        v4 = NftTable("ip", TABLE, runner)
        _desired(v4)
        calls: list[list[str]] = []
        meanwhile = _set_maker(netns, runner, calls)
        assert await apply_together([v4], meanwhile)
        assert not await apply_together([v4], meanwhile)
        assert len(calls) == 2 and runner.scripts == 1

    trio.run(main)


def test_a_refused_joint_run_writes_the_sets_once_and_blames_per_table(netns: str) -> None:
    async def main() -> None:
        runner = CountingRunner(netns)
        v4, v6 = NftTable("ip", TABLE, runner), NftTable("ip6", TABLE, runner)
        _looking_up(v4)
        v6.set_chains(
            [Chain("cali-bad", NftSerialiser(6).rules((TableRule((), Jump("cali-no")),)))]
        )
        calls: list[list[str]] = []
        assert await apply_together([v4, v6], _set_maker(netns, runner, calls))
        assert len(calls) == 1
        assert len(held(netns)["cali-blocked"]) == 1
        assert set(v6.held_back()) == {"cali-bad"}

    trio.run(main)


class _Tee(Fed):
    """A fed command's input, noted as it goes to the real one."""

    def __init__(self, inner: Fed, sent: list[str]) -> None:
        super().__init__()
        self._inner = inner
        self._sent = sent

    def _send(self, data: bytes) -> None:
        self._sent.extend(data.decode().splitlines())
        self._inner.send(data)


class RecordingRunner(ProcessRunner):
    """The real tools, noting every line fed to a streamed command."""

    def __init__(self, netns: str) -> None:
        super().__init__(netns)
        self.fed: list[str] = []

    @asynccontextmanager
    async def feeding(self, argv: Sequence[str]) -> AsyncIterator[Fed]:
        async with feeding(ProcessRunner(self.netns), argv) as inner:
            tee = _Tee(inner, self.fed)
            yield tee
        tee.result = inner.result


def test_every_tables_anonymous_sets_are_bound_before_any_other_chain_is_filled(
    netns: str,
) -> None:
    """Binding an anonymous set walks the whole transaction so far, the
    other family's part too: both tables' heads (their declarations and
    the chains holding one) go in before either table's other chains."""

    def chains(version: int) -> list[Chain[NftRule]]:
        nft = NftSerialiser(version)
        return [
            Chain("cali-a-plain", nft.rules((TableRule((), Jump("cali-z-ports")),))),
            Chain("cali-b-plain", nft.rules((TableRule((), Drop()),))),
            Chain("cali-z-ports", (NftRule("tcp dport { 80, 443 } accept"),)),
        ]

    async def main() -> None:
        runner = RecordingRunner(netns)
        v4, v6 = NftTable("ip", TABLE, runner), NftTable("ip6", TABLE, runner)
        v4.set_chains(chains(4))
        v6.set_chains(chains(6))
        assert await apply_together([v4, v6])
        fills = [line for line in runner.fed if line.startswith("add rule")]
        assert [line.split()[2:5:2] for line in fills] == [
            ["ip", "cali-z-ports"],
            ["ip6", "cali-z-ports"],
            ["ip", "cali-a-plain"],
            ["ip", "cali-b-plain"],
            ["ip6", "cali-a-plain"],
            ["ip6", "cali-b-plain"],
        ]
        declared = [i for i, line in enumerate(runner.fed) if line.startswith("add chain")]
        assert max(declared) < runner.fed.index(fills[2])  # every chain, before the plain ones
        for family in ("ip", "ip6"):
            kernel = held(netns, family)
            assert [len(kernel[c.name]) for c in chains(4)] == [1, 1, 1]

    trio.run(main)


class EndingAfterBeside(ProcessRunner):
    """The real tools; a fed command's input ends only once ``beside`` has
    begun (run in turn after it, it never would)."""

    def __init__(self, netns: str) -> None:
        super().__init__(netns)
        self.beside_begun = trio.Event()

    @asynccontextmanager
    async def feeding(self, argv: Sequence[str]) -> AsyncIterator[Fed]:
        async with feeding(ProcessRunner(self.netns), argv) as fed:
            yield fed
            await self.beside_begun.wait()


def test_beside_runs_while_nft_commits_and_only_when_it_runs(netns: str) -> None:
    """The reads for the steps after the rules (routes, sysctls) go beside
    nft's commit, once the sets are written; with nothing to write there is
    no commit to go beside."""

    async def main() -> None:
        runner = EndingAfterBeside(netns)
        v4, v6 = _families(runner)
        events: list[str] = []

        async def meanwhile() -> None:
            events.append("sets")

        async def beside() -> None:
            events.append(f"beside, chains {_chains(netns, 'ip6')}")
            runner.beside_begun.set()

        with trio.fail_after(10):
            assert await apply_together([v4, v6], meanwhile, beside)
        assert events == ["sets", "beside, chains []"]
        assert "cali-six" in held(netns, "ip6")
        assert not await apply_together([v4, v6], meanwhile, beside)
        assert events == ["sets", "beside, chains []", "sets"]

    trio.run(main)
