"""The nftables table programmer against the real kernel, in a throwaway namespace.

What it writes is what the kernel then holds; it writes only what
differs, in one transaction; it finds and repairs tampering when told to
resync; a restart onto a correct table writes nothing; a refused
transaction changes nothing; it never touches another table.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence

import pytest
import trio

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import ProcessRunner
from dataplane.linux.nftables.listing import listed_chains
from dataplane.linux.nftables.serialise import NftRule, NftSerialiser
from dataplane.linux.nftables.table import BaseChain, NftTable
from dataplane.linux.rules.action import Accept, Drop, Jump
from dataplane.linux.rules.chain import Chain
from dataplane.linux.rules.match import Addresses, Port, Protocol, Side
from dataplane.linux.rules.rule import TableRule
from tests.linux.held_reads import HeldReads, refresh_during_a_write, write_during_a_read

NFT = NftSerialiser(4)
TABLE = "dp-test"


def _rules(*rules: TableRule) -> tuple[NftRule, ...]:
    return NFT.rules(rules)


def _leaf(i: int) -> Chain[NftRule]:
    return Chain(
        f"cali-leaf-{i}",
        _rules(
            TableRule((Addresses(Side.SRC, (f"10.0.{i}.0/24",)),), Accept(), comment=f"leaf {i}"),
            TableRule((Protocol("tcp"), Port(Side.DST, 22)), Drop()),
        ),
    )


def _root(width: int) -> Chain[NftRule]:
    return Chain(
        "cali-root", _rules(*(TableRule((), Jump(f"cali-leaf-{i}")) for i in range(width)))
    )


HOOK = BaseChain(
    "filter-INPUT",
    "type filter hook input priority filter",
    _rules(TableRule((), Jump("cali-root"))),
)


def _desired(table: NftTable, width: int = 4) -> None:
    table.set_chains([_root(width), *(_leaf(i) for i in range(width))])
    table.set_base_chain(HOOK)


def nft(netns: str, *args: str, stdin: str = "") -> str:
    done = subprocess.run(
        ["ip", "netns", "exec", netns, "nft", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def held(netns: str, family: str = "ip", name: str = TABLE) -> dict[str, list[tuple[int, str]]]:
    """chain -> [(handle, comment)] as the kernel holds them."""
    out: dict[str, list[tuple[int, str]]] = {}
    for item in json.loads(nft(netns, "-j", "list", "table", family, name))["nftables"]:
        if "chain" in item:
            out.setdefault(item["chain"]["name"], [])
        elif "rule" in item:
            rule = item["rule"]
            out.setdefault(rule["chain"], []).append((rule["handle"], rule.get("comment", "")))
    return out


def test_writes_what_differs_and_nothing_else(netns: str) -> None:
    async def main() -> None:
        table = NftTable("ip", TABLE, ProcessRunner(netns))
        _desired(table)
        assert await table.apply()
        first = held(netns)
        assert {name: len(rules) for name, rules in first.items()} == {
            "cali-root": 4,
            **{f"cali-leaf-{i}": 2 for i in range(4)},
            "filter-INPUT": 1,
        }
        assert first["cali-leaf-1"][0][1].startswith("cali:")
        assert first["cali-leaf-1"][0][1].endswith(" leaf 1")  # the label rides along
        assert "hook input priority filter" in nft(
            netns, "list", "chain", "ip", TABLE, "filter-INPUT"
        )
        # Nothing changed: nothing written, nothing read.
        reads = table.reads
        assert not await table.apply()
        assert table.writes == 1 and table.reads == reads
        # One chain changed: one transaction; the others keep their rules
        # (same handles: not rewritten).
        table.update_chain(Chain("cali-leaf-2", _rules(TableRule((), Drop()))))
        assert await table.apply()
        second = held(netns)
        assert table.writes == 2
        assert len(second["cali-leaf-2"]) == 1
        for name in ("cali-root", "cali-leaf-0", "cali-leaf-1", "cali-leaf-3", "filter-INPUT"):
            assert second[name] == first[name]
        # A chain and the rule that jumps to it go in one transaction.
        table.update_chain(_root(3))
        table.remove_chain("cali-leaf-3")
        assert await table.apply()
        assert "cali-leaf-3" not in held(netns)

    trio.run(main)


def test_tampering_is_repaired_at_resync_and_a_restart_writes_nothing(netns: str) -> None:
    async def main() -> None:
        table = NftTable("ip", TABLE, ProcessRunner(netns))
        _desired(table)
        await table.apply()
        wanted = {name: len(rules) for name, rules in held(netns).items()}
        # Someone flushes one chain, deletes a rule of another and adds a chain.
        handle = held(netns)["cali-leaf-1"][0][0]
        nft(netns, "flush", "chain", "ip", TABLE, "cali-leaf-0")
        nft(netns, "delete", "rule", "ip", TABLE, "cali-leaf-1", "handle", str(handle))
        nft(netns, "add", "chain", "ip", TABLE, "cali-intruder")
        untouched = held(netns)["cali-leaf-2"]
        table.mark_for_resync()
        assert await table.apply()
        after = held(netns)
        assert {name: len(rules) for name, rules in after.items()} == wanted
        assert after["cali-leaf-2"] == untouched  # only what differed was written
        # The whole table deleted: written again whole.
        nft(netns, "delete", "table", "ip", TABLE)
        table.mark_for_resync()
        assert await table.apply()
        assert {name: len(rules) for name, rules in held(netns).items()} == wanted
        # A restart: a new programmer, the same desired state, no writes.
        again = NftTable("ip", TABLE, ProcessRunner(netns))
        _desired(again)
        assert not await again.apply()
        assert again.writes == 0

    trio.run(main)


def test_a_refused_chain_is_quarantined_and_the_rest_lands(netns: str) -> None:
    async def main() -> None:
        now = [0.0]
        table = NftTable("ip", TABLE, ProcessRunner(netns), clock=lambda: now[0])
        _desired(table)
        await table.apply()
        before = held(netns)
        # A jump to a chain that does not exist, beside a good change and a
        # new chain that jumps nowhere either.
        table.update_chain(Chain("cali-leaf-0", _rules(TableRule((), Drop()))))
        table.update_chain(Chain("cali-leaf-1", _rules(TableRule((), Jump("cali-nowhere")))))
        table.update_chain(Chain("cali-new", _rules(TableRule((), Jump("cali-nowhere-2")))))
        table.update_chain(_root(4))  # (unchanged)
        assert await table.apply()
        after = held(netns)
        assert len(after["cali-leaf-0"]) == 1  # the good change landed
        assert after["cali-leaf-1"] == before["cali-leaf-1"]  # the last good version stays
        assert [c for _, c in after["cali-new"]] == [
            next(c for _, c in after["cali-new"] if "fail-closed" in c)
        ]  # never held: fail-closed in its place
        assert set(table.held_back()) == {"cali-leaf-1", "cali-new"}
        assert "cali-nowhere" in table.held_back()["cali-leaf-1"]
        assert sorted(n for n, _ in table.take_refusals()) == ["cali-leaf-1", "cali-new"]
        assert table.take_refusals() == []  # said once
        # Not yet due: nothing retried, nothing written.
        writes = table.writes
        assert not await table.apply()
        assert table.writes == writes
        # The missing chain appears; at the retry the refused ones pass and land.
        table.update_chain(Chain("cali-nowhere", _rules(TableRule((), Drop()))))
        table.update_chain(Chain("cali-nowhere-2", _rules(TableRule((), Drop()))))
        now[0] += 3600
        assert await table.apply()
        assert table.held_back() == {}
        final = held(netns)
        assert len(final["cali-leaf-1"]) == 1 and len(final["cali-new"]) == 1
        assert not any("fail-closed" in c for _, c in final["cali-new"])

    trio.run(main)


def test_a_refusal_no_chain_can_be_blamed_for_changes_nothing(netns: str) -> None:
    async def main() -> None:
        table = NftTable("ip", TABLE, ProcessRunner(netns))
        _desired(table)
        await table.apply()
        before = held(netns)
        # A base chain refused: it cannot be set aside (the hook is the table's).
        table.update_chain(Chain("cali-leaf-0", _rules(TableRule((), Drop()))))
        table.set_base_chain(
            BaseChain(HOOK.name, HOOK.spec, _rules(TableRule((), Jump("cali-nowhere"))))
        )
        with pytest.raises(ProgrammingError, match="nft refused the ip dp-test transaction"):
            await table.apply()
        assert held(netns) == before
        # Fixed, it goes through (the table is read again first).
        table.set_base_chain(HOOK)
        reads = table.reads
        assert await table.apply()
        assert table.reads == reads + 1
        assert len(held(netns)["cali-leaf-0"]) == 1

    trio.run(main)


def test_other_tables_are_never_touched_and_cleanup_removes_ours(netns: str) -> None:
    async def main() -> None:
        nft(netns, "-f", "-", stdin="add table ip other\nadd chain ip other c\n")
        nft(netns, "-f", "-", stdin=f"add table ip6 {TABLE}\nadd chain ip6 {TABLE} c\n")
        table = NftTable("ip", TABLE, ProcessRunner(netns))
        _desired(table)
        await table.apply()
        await table.cleanup()
        ruleset = nft(netns, "list", "ruleset")
        assert "table ip other" in ruleset and f"table ip6 {TABLE}" in ruleset
        assert f"table ip {TABLE}" not in ruleset
        # After a cleanup, an apply writes everything again.
        assert await table.apply()
        assert "cali-root" in held(netns)

    trio.run(main)


# As `nft -a list table` prints it (nft 1.0.6): a set whose elements wrap,
# a base chain's hook line, one of our rules with a label, a stranger's.
LISTING = b"""table ip dp-test { # handle 7
\tset cali40s.web { # handle 2
\t\ttype ipv4_addr
\t\tflags interval
\t\telements = { 10.0.0.0/8, 11.0.0.0/8,
\t\t\t     12.0.0.0/8 }
\t}

\tchain filter-INPUT { # handle 1
\t\ttype filter hook input priority filter; policy accept;
\t\tjump cali-root comment "cali:wUHhoiAYhphO9Mso" # handle 5
\t}

\tchain cali-root { # handle 3
\t\tip saddr { 10.0.0.0/8 } accept comment "cali:Ma6ylx2ZKe_FvLhc leaf 1" # handle 6
\t\tiifname "eth0" accept # handle 9
\t}

\tchain cali-empty { # handle 4
\t}
}
"""


def test_the_listing_is_read_as_our_rule_hashes_per_chain() -> None:
    assert listed_chains(LISTING) == {
        "filter-INPUT": ["wUHhoiAYhphO9Mso"],
        "cali-root": ["Ma6ylx2ZKe_FvLhc", None],
        "cali-empty": [],
    }


async def _loaded(
    netns: str, is_held: Callable[[Sequence[str]], bool]
) -> tuple[HeldReads, NftTable, dict[str, int]]:
    """A table applied through a runner that can hold the commands
    ``is_held`` picks, and how many rules each chain then holds."""
    runner = HeldReads(ProcessRunner(netns), is_held)
    table = NftTable("ip", TABLE, runner)
    _desired(table)
    await table.apply()
    return runner, table, {name: len(rules) for name, rules in held(netns).items()}


def test_a_refresh_beside_the_applies_repairs_tampering_and_never_undoes_a_write(
    netns: str,
) -> None:
    async def main() -> None:
        runner, table, wanted = await _loaded(netns, lambda argv: "list" in argv)
        # Nothing wrong: a refresh finds nothing, the next apply writes nothing.
        assert not await table.refresh()
        assert not await table.apply()
        # Tampering, found by a refresh (no resync asked), repaired by the next apply.
        nft(netns, "flush", "chain", "ip", TABLE, "cali-leaf-0")
        assert await table.refresh()
        assert await table.apply()
        assert {name: len(rules) for name, rules in held(netns).items()} == wanted
        # A write lands while a refresh's read is in flight (it read the
        # old leaf-1): the refresh must not take that write back.
        found: list[bool] = []

        async def refresh() -> None:
            found.append(await table.refresh())

        async def write() -> None:  # lands while the read is held
            table.update_chain(Chain("cali-leaf-1", _rules(TableRule((), Drop()))))
            assert await table.apply()

        await write_during_a_read(runner, refresh, write)
        assert found == [False]  # what it read of leaf-1 is older than the write
        assert not await table.apply()  # nothing left that differs
        assert len(held(netns)["cali-leaf-1"]) == 1

    trio.run(main)


def test_a_refresh_that_comes_back_during_a_write_is_taken_in_after_it(netns: str) -> None:
    async def main() -> None:
        runner, table, wanted = await _loaded(netns, lambda argv: "-f" in argv)
        nft(netns, "flush", "chain", "ip", TABLE, "cali-leaf-0")  # tampering
        # An apply of another chain is writing (nft -f has not answered
        # yet) when the refresh's read of the tampering comes back.
        table.update_chain(Chain("cali-leaf-1", _rules(TableRule((), Drop()))))
        wanted["cali-leaf-1"] = 1
        assert await refresh_during_a_write(runner, table.apply, table.refresh)
        # What the refresh found is not lost to that apply: the next repairs it.
        assert await table.apply()
        assert {name: len(rules) for name, rules in held(netns).items()} == wanted
        assert not await table.refresh()

    trio.run(main)
