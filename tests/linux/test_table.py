"""Table against the real kernel (both backends), in a throwaway namespace."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
import trio

from dataplane.linux.iptables.backend import IptablesCommands
from dataplane.linux.iptables.chains import Chain, IptRule, parse_save
from dataplane.linux.iptables.table import Table
from dataplane.linux.kernel.cmd import ProcessRunner

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a network namespace")


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"dptbl{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _table(netns: str, backend: str, threshold: int = 2000, batch: int = 2000) -> Table:
    commands = IptablesCommands.for_backend(backend, 4)
    return Table(
        "filter",
        4,
        ProcessRunner(netns),
        commands,
        preload_threshold=threshold,
        preload_batch=batch,
    )


def _saved(netns: str, backend: str) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", netns, f"iptables-{backend}-save", "-t", "filter"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _tree(width: int) -> list[Chain]:
    """cali-root -> cali-mid-N -> cali-leaf-N, so order of creation matters."""
    leaves = [
        Chain(f"cali-leaf-{i}", (IptRule(f"-s 10.0.{i}.0/24", "-j ACCEPT"),)) for i in range(width)
    ]
    mids = [Chain(f"cali-mid-{i}", (IptRule("", f"-j cali-leaf-{i}"),)) for i in range(width)]
    root = Chain(
        "cali-root", tuple(IptRule(f"-d 10.1.{i}.0/24", f"-g cali-mid-{i}") for i in range(width))
    )
    return [root, *mids, *leaves]


@pytest.mark.parametrize("backend", ["nft", "legacy"])
def test_writes_only_differences_and_preloads_large_loads(netns: str, backend: str) -> None:
    async def main() -> None:
        table = _table(netns, backend, threshold=10, batch=7)
        table.set_chains(_tree(12))  # 25 new chains: preloaded in batches
        table.set_hooks("FORWARD", [IptRule("", "-j cali-root")])
        assert await table.apply()
        assert table.writes == 4 + 1  # ceil(25 / 7) preload batches, then the final one
        saved = parse_save(_saved(netns, backend))["filter"]
        assert len(saved.chains["cali-root"].hashes) == 12
        assert all(h is not None for h in saved.chains["cali-leaf-11"].hashes)
        assert any("cali-root" in line for line in saved.chains["FORWARD"].lines)
        # Nothing changed: nothing written. One chain changed: one small write.
        assert not await table.apply()
        table.update_chain(Chain("cali-leaf-3", (IptRule("-s 10.9.9.0/24", "-j DROP"),)))
        writes = table.writes
        assert await table.apply()
        assert table.writes == writes + 1
        # A fresh Table (a restart) adopts the kernel's state: nothing to write.
        again = _table(netns, backend)
        chains = _tree(12)
        chains[1 + 12 + 3] = Chain("cali-leaf-3", (IptRule("-s 10.9.9.0/24", "-j DROP"),))
        again.set_chains(chains)
        again.set_hooks("FORWARD", [IptRule("", "-j cali-root")])
        assert not await again.apply()
        # Someone flushes a chain; a resync notices and rewrites just it.
        subprocess.run(
            ["ip", "netns", "exec", netns, f"iptables-{backend}", "-F", "cali-mid-5"], check=True
        )
        again.mark_for_resync()
        assert await again.apply()
        assert parse_save(_saved(netns, backend))["filter"].chains["cali-mid-5"].hashes
        # Cleanup removes every chain and hook we own, nothing else.
        await again.cleanup_all()
        assert "cali-" not in _saved(netns, backend)

    trio.run(main)
