"""Table against the real kernel (both backends, in a throwaway namespace) and the fake.

The same test runs on the iptables fake (``tests/linux/fake_iptables.py``) without
root, which the contract suite holds to the real tools.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import trio

from dataplane.config import Config
from dataplane.linux.iptables.backend import IptablesCommands
from dataplane.linux.iptables.chains import IptChain, IptRule, parse_save
from dataplane.linux.iptables.table import PRELOAD_BATCH, PRELOAD_THRESHOLD, Table
from dataplane.linux.kernel.cmd import CommandRunner, ProcessRunner
from dataplane.linux.programmers import _iptables
from dataplane.linux.rules.chain import Chain
from dataplane.linux.rules.rule import Origin
from tests.linux.fake_iptables import FakeIptables
from tests.linux.held_reads import HeldReads, refresh_during_a_write, write_during_a_read


@dataclass(frozen=True)
class Tools:
    """One backend's tools: a runner for the Table, and a way to look and tamper."""

    backend: str  # the commands' backend: legacy or nft (the fake answers both)
    runner: CommandRunner
    run: Callable[[list[str], bytes], bytes]  # argv, stdin -> stdout; raises on failure

    def saved(self) -> str:
        return self.run([f"iptables-{self.backend}-save", "-t", "filter"], b"").decode()

    def restore(self, text: str) -> None:
        self.run([f"iptables-{self.backend}-restore", "--noflush"], text.encode())


@pytest.fixture(params=["nft", "legacy", "fake"])
def tools(request: pytest.FixtureRequest) -> Iterator[Tools]:
    if request.param == "fake":
        fake = FakeIptables()

        def run_fake(argv: list[str], stdin: bytes) -> bytes:
            result = fake.run_sync(argv, stdin=stdin)
            assert result.returncode == 0, result.stderr
            return result.stdout

        yield Tools("nft", fake, run_fake)
        return
    name = request.getfixturevalue("netns")  # skipped without root

    def run_real(argv: list[str], stdin: bytes) -> bytes:
        done = subprocess.run(
            ["ip", "netns", "exec", name, *argv], input=stdin, check=True, capture_output=True
        )
        return done.stdout

    yield Tools(request.param, ProcessRunner(name), run_real)


def _table(tools: Tools, threshold: int = 2000, batch: int = 2000) -> Table:
    commands = IptablesCommands.for_backend(tools.backend, 4)
    return Table(
        "filter",
        4,
        tools.runner,
        commands,
        preload_threshold=threshold,
        preload_batch=batch,
    )


def _tree(width: int) -> list[IptChain]:
    """cali-root -> cali-mid-N -> cali-leaf-N, so order of creation matters."""
    leaves = [
        Chain(f"cali-leaf-{i}", (IptRule(f"-s 10.0.{i}.0/24", "-j ACCEPT"),)) for i in range(width)
    ]
    mids = [Chain(f"cali-mid-{i}", (IptRule("", f"-j cali-leaf-{i}"),)) for i in range(width)]
    root = Chain(
        "cali-root", tuple(IptRule(f"-d 10.1.{i}.0/24", f"-g cali-mid-{i}") for i in range(width))
    )
    return [root, *mids, *leaves]


def test_writes_only_differences_and_preloads_large_loads(tools: Tools) -> None:
    async def main() -> None:
        table = _table(tools, threshold=10, batch=7)
        table.set_chains(_tree(12))  # 25 new chains: preloaded in batches
        table.set_hooks("FORWARD", [IptRule("", "-j cali-root")])
        assert await table.apply()
        assert table.writes == 4 + 1  # ceil(25 / 7) preload batches, then the final one
        saved = parse_save(tools.saved())["filter"]
        assert len(saved.chains["cali-root"].hashes) == 12
        assert all(h is not None for h in saved.chains["cali-leaf-11"].hashes)
        assert any("cali-root" in line for line in saved.chains["FORWARD"].lines)
        # Nothing changed: nothing written. One chain changed: one small write.
        assert not await table.apply()
        table.update_chain(Chain("cali-leaf-3", (IptRule("-s 10.9.9.0/24", "-j DROP"),)))
        writes = table.writes
        assert await table.apply()
        assert table.writes == writes + 1
        # The same rules rendered from another policy rule: a change to
        # report (labels follow it), nothing to write.
        moved = IptRule(
            "-s 10.9.9.0/24", "-j DROP", origin=Origin("t", "p", "inbound", "1", "deny")
        )
        table.take_changed()
        table.update_chain(Chain("cali-leaf-3", (moved,)))
        assert table.take_changed() == {"cali-leaf-3"}
        assert table.origin("cali-leaf-3", 0) == moved.origin
        assert not await table.apply()
        # A fresh Table (a restart) adopts the kernel's state: nothing to write.
        again = _table(tools)
        chains = _tree(12)
        chains[1 + 12 + 3] = Chain("cali-leaf-3", (IptRule("-s 10.9.9.0/24", "-j DROP"),))
        again.set_chains(chains)
        again.set_hooks("FORWARD", [IptRule("", "-j cali-root")])
        assert not await again.apply()
        # Someone flushes a chain; a resync notices and rewrites just it.
        tools.restore("*filter\n-F cali-mid-5\nCOMMIT\n")
        again.mark_for_resync()
        assert await again.apply()
        assert parse_save(tools.saved())["filter"].chains["cali-mid-5"].hashes
        # Cleanup removes every chain and hook we own, nothing else.
        await again.cleanup_all()
        assert "cali-" not in tools.saved()

    trio.run(main)


def test_a_refresh_beside_the_applies_finds_tampering_and_never_takes_back_a_write(
    tools: Tools,
) -> None:
    runner = HeldReads(tools.runner, lambda argv: argv[0].endswith("-save"))
    table = Table("filter", 4, runner, IptablesCommands.for_backend(tools.backend, 4))
    table.set_chains(_tree(3))
    table.set_hooks("FORWARD", [IptRule("", "-j cali-root")])

    def chains() -> dict[str, list[str | None]]:
        return {n: list(c.hashes) for n, c in parse_save(tools.saved())["filter"].chains.items()}

    async def scenario() -> None:
        await table.apply()
        # As the kernel was left: nothing differs, the next apply writes nothing.
        assert not await table.refresh()
        assert not await table.apply()
        # Someone flushes a chain of ours, deletes our hook rule and leaves a
        # chain with our prefix behind; found beside the applies, repaired by
        # the next one alone (no read of its own).
        hook = next(line for line in tools.saved().splitlines() if "-j cali-root" in line)
        tools.restore(f"*filter\n-F cali-mid-1\n{'-D' + hook[2:]}\n:cali-stray - [0:0]\nCOMMIT\n")
        assert await table.refresh()
        reads = runner.reads
        assert await table.apply()
        assert runner.reads == reads
        assert chains()["cali-mid-1"] and "cali-stray" not in chains()
        assert "-j cali-root" in tools.saved()
        assert not await table.refresh()

        # A read taken before a write keeps its hands off what that write
        # wrote: the save is held back until the write has landed.
        async def write() -> None:  # cali-leaf-2's new rule: not in the save
            table.update_chain(Chain("cali-leaf-2", (IptRule("-s 10.7.0.0/16", "-j DROP"),)))
            assert await table.apply()

        await write_during_a_read(runner, table.refresh, write)
        assert not await table.apply()  # nothing taken back, nothing to write again
        assert "10.7.0.0/16" in tools.saved()
        assert not await table.refresh()

    trio.run(scenario)


def test_a_refresh_that_comes_back_during_a_write_is_taken_in_after_it(tools: Tools) -> None:
    runner = HeldReads(tools.runner, lambda argv: argv[0].endswith("-restore"))
    table = Table("filter", 4, runner, IptablesCommands.for_backend(tools.backend, 4))
    table.set_chains(_tree(3))

    async def scenario() -> None:
        await table.apply()
        tools.restore("*filter\n-F cali-mid-1\nCOMMIT\n")  # tampering
        # An apply of another chain is writing (its restore has not
        # answered yet) when the refresh's read of the tampering comes back.
        table.update_chain(Chain("cali-leaf-2", (IptRule("-s 10.7.0.0/16", "-j DROP"),)))
        assert await refresh_during_a_write(runner, table.apply, table.refresh)
        # What the refresh found is not lost to that apply: the next repairs it.
        assert await table.apply()
        assert parse_save(tools.saved())["filter"].chains["cali-mid-1"].hashes
        assert not await table.refresh()

    trio.run(scenario)


@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_a_large_load_is_preloaded_in_batches_on_nft_only(backend: str) -> None:
    """iptables-nft-restore slows quadratically with the chains one restore
    declares, so many new chains go in ahead in batches; iptables-legacy
    replaces the whole table at each restore, so there batches would write
    it once per batch (5,000 services: 15 s against 2 s): one restore."""
    fake = FakeIptables()
    tables = _iptables(Config(), fake, backend, "cali-", lambda: 0.0, (4,))
    table = tables[("filter", 4)]
    width = PRELOAD_THRESHOLD // 2 + 1  # 2 * width + 1 chains: over the threshold

    async def main() -> None:
        table.set_chains(_tree(width))
        table.set_hooks("FORWARD", [IptRule("", "-j cali-root")])
        assert await table.apply()

    trio.run(main)
    batches = -(-(2 * width + 1) // PRELOAD_BATCH)
    assert table.writes == (1 if backend == "legacy" else batches + 1)
    saved = parse_save(fake.run_sync([f"iptables-{backend}-save"]).stdout.decode())
    assert len(saved["filter"].chains["cali-root"].hashes) == width
