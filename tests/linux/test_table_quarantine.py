"""A chain the kernel refuses is quarantined; every other chain still lands.

Against the real kernel (both backends) in a throwaway namespace: the
refused chain keeps its last good version or, without one, is written
fail-closed; it is retried alone when its backoff ends and leaves
quarantine when it changes.
"""

from __future__ import annotations

import subprocess

import trio

from dataplane.linux.iptables.backend import IptablesCommands
from dataplane.linux.iptables.chains import IptChain, IptRule, parse_save
from dataplane.linux.iptables.table import Table
from dataplane.linux.kernel.cmd import ProcessRunner
from dataplane.linux.rules.chain import Chain

# The kernel's parser refuses a second -d on one rule.
BAD = IptRule("-d 10.0.0.0/8 ! -d 10.1.0.0/16", "-j ACCEPT")
GOOD = IptRule("-d 10.0.0.0/8", "-j ACCEPT")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _table(netns: str, backend: str, clock: Clock) -> Table:
    return Table(
        "filter", 4, ProcessRunner(netns), IptablesCommands.for_backend(backend, 4), clock=clock
    )


def _rules(netns: str, backend: str, chain: str) -> list[str]:
    argv = ["ip", "netns", "exec", netns, f"iptables-{backend}-save", "-t", "filter"]
    text = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    saved = parse_save(text)["filter"]
    return list(saved.chains[chain].lines)


def _chains(policy: tuple[IptRule, ...]) -> list[IptChain]:
    return [
        Chain("cali-root", (IptRule("", "-j cali-pol"), IptRule("", "-j cali-other"))),
        Chain("cali-pol", policy),
        Chain("cali-other", (IptRule("-s 10.2.0.0/16", "-j DROP"),)),
    ]


def _check(netns: str, backend: str) -> None:
    async def main() -> None:
        clock = Clock()
        table = _table(netns, backend, clock)
        # A new chain the kernel refuses: written fail-closed, the rest lands.
        table.set_chains(_chains((GOOD, BAD)))
        await table.apply()
        (refusal,) = table.take_refusals()
        assert refusal.chain == "cali-pol"
        assert refusal.rule_index == 1
        assert "multiple -d" in refusal.message
        assert "cali-pol" in table.quarantine
        assert _rules(netns, backend, "cali-pol")[-1].endswith("-j DROP")
        assert len(_rules(netns, backend, "cali-root")) == 2
        assert len(_rules(netns, backend, "cali-other")) == 1

        # An unrelated change lands in the next apply; the refused chain is
        # not retried before its backoff ends (no new refusal reported).
        table.update_chain(Chain("cali-other", (IptRule("-s 10.3.0.0/16", "-j DROP"),)))
        await table.apply()
        assert "10.3.0.0/16" in _rules(netns, backend, "cali-other")[0]
        assert table.take_refusals() == []
        # When the backoff ends it is retried alone, and stays quarantined.
        clock.now = table.quarantine.next_retry()
        await table.apply()
        rejection = table.quarantine.get("cali-pol")
        assert rejection is not None and rejection.failures == 2

        # Fixing the object releases it: the new version is written.
        table.update_chain(Chain("cali-pol", (GOOD,)))
        assert "cali-pol" not in table.quarantine
        await table.apply()
        assert len(_rules(netns, backend, "cali-pol")) == 1
        assert "-j ACCEPT" in _rules(netns, backend, "cali-pol")[0]

        # A later bad version keeps the last good one in the kernel.
        table.update_chain(Chain("cali-pol", (BAD,)))
        await table.apply()
        assert [r.chain for r in table.take_refusals()] == ["cali-pol"]
        assert "-j ACCEPT" in _rules(netns, backend, "cali-pol")[0]
        assert not _rules(netns, backend, "cali-pol")[0].endswith("DROP")

        # A restart adopts it as it is and finds the same refusal.
        again = _table(netns, backend, clock)
        again.set_chains(_chains((BAD,)))
        await again.apply()
        assert [r.chain for r in again.take_refusals()] == ["cali-pol"]
        assert "-j ACCEPT" in _rules(netns, backend, "cali-pol")[0]

        # Any new version (here an empty chain) ends the quarantine.
        again.set_chains([*_chains((GOOD,))[:1], Chain("cali-pol", ()), Chain("cali-other")])
        await again.apply()
        assert len(again.quarantine) == 0

    trio.run(main)


def test_refused_chain_is_quarantined_on_nft(netns: str) -> None:
    _check(netns, "nft")


def test_refused_chain_is_quarantined_on_legacy(netns: str) -> None:
    _check(netns, "legacy")


def test_a_chain_only_the_nft_commit_refuses_is_quarantined_too(netns: str) -> None:
    # nft's parser passes "! -s 0.0.0.0/0" (so --test finds nothing) and
    # the kernel refuses it at commit (EINVAL): the failing line names it.
    commit_bad = IptRule("! -s 0.0.0.0/0", "-j ACCEPT")

    async def main() -> None:
        table = _table(netns, "nft", Clock())
        table.set_chains(_chains((GOOD, commit_bad)))
        await table.apply()
        (refusal,) = table.take_refusals()
        assert refusal.chain == "cali-pol"
        assert refusal.rule_index == 1
        assert "Invalid argument" in refusal.message
        assert _rules(netns, "nft", "cali-pol")[-1].endswith("-j DROP")
        assert len(_rules(netns, "nft", "cali-root")) == 2
        assert len(_rules(netns, "nft", "cali-other")) == 1
        # Fixed, it is written.
        table.update_chain(Chain("cali-pol", (GOOD,)))
        await table.apply()
        assert "cali-pol" not in table.quarantine
        assert _rules(netns, "nft", "cali-pol")[0].endswith("-j ACCEPT")

    trio.run(main)


def test_a_removed_quarantined_chain_leaves_nothing_behind(netns: str) -> None:
    # Chains come and go with pods and policies: what the table keeps about
    # a refused one (its quarantine, its fail-closed version) goes with it.
    async def main() -> None:
        table = _table(netns, "nft", Clock())
        for i in range(20):
            table.set_chains([*_chains((GOOD,)), Chain(f"cali-bad-{i}", (BAD,))])
            await table.apply()
            assert [r.chain for r in table.take_refusals()] == [f"cali-bad-{i}"]
            assert table.keeps_last_good(f"cali-bad-{i}") is False  # written fail-closed
        assert len(table.quarantine) == 1
        assert set(table._fail_closed_hashes) == {"cali-bad-19"}
        table.set_chains(_chains((GOOD,)))
        await table.apply()
        assert len(table.quarantine) == 0
        assert table._fail_closed_hashes == {}

    trio.run(main)
