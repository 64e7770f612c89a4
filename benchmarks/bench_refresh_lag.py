"""How long a refresh holds the driver's loop: the table read back, on each backend.

The filter table of a node with ``--endpoints`` endpoints (the same node
as ``bench_nft_table.py``) is loaded into a throwaway namespace by each
table programmer; then ``--refreshes`` times the programmer refreshes (it
reads the table back, compares by hash, finds nothing that differs) as
the platform's refresher does beside the applies, and applies (nothing to
read or write). Meanwhile a task on the same trio loop wakes every
millisecond and records how late it woke: the longest lateness is the
longest the refresh held the loop. As a control, the read-back's parse is
also timed run directly on the loop (what a refresh held it for when the
parse ran there). The issue's goal: the loop never blocked > 50 ms by a
refresh.

Measured 2026-11-25 (2 cores, kernel 6.18, nft 1.0.6), longest hold /
parse on the loop: 1,000 endpoints 5.4 / 18 ms nft, 8.9 / 28 ms
iptables-nft, 8.7 / 28 ms iptables-legacy; 5,000 endpoints 22.9 / 83 ms
nft, 28.9 / 156 ms iptables-nft. (Before the heap was frozen after the
load, 100 and 108-121 ms at 5,000: full collections.)

Usage (root, nft and iptables installed): python benchmarks/bench_refresh_lag.py
    [--endpoints N] [--refreshes N] [--backends nft,iptables-nft,iptables-legacy]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import each_backend, machine, percentile, print_row
from benchmarks.bench_nft_table import HOOKS, Node, policies
from dataplane.config import Config
from dataplane.core.heap import HeapFreezer
from dataplane.linux.iptables.backend import IptablesCommands
from dataplane.linux.iptables.saved import saved_chains
from dataplane.linux.iptables.serialise import IptablesSerialiser
from dataplane.linux.iptables.table import Table
from dataplane.linux.kernel.cmd import ProcessRunner
from dataplane.linux.nftables.listing import listed_chains
from dataplane.linux.nftables.serialise import NftSerialiser
from dataplane.linux.nftables.table import BaseChain, NftTable
from dataplane.linux.rules.marks import Marks

HEADER = ["backend", "rules", "refresh p50", "loop held, longest", "parse on the loop (control)"]


async def _lagging(lags: list[float], done: trio.Event) -> None:
    while not done.is_set():
        start = time.perf_counter()
        await trio.sleep(0.001)
        lags.append(time.perf_counter() - start - 0.001)


Setup = tuple[NftTable | Table, int, list[str], Callable[[bytes], object]]


def _nft(runner: ProcessRunner, marks: Marks, everyone: range) -> Setup:
    node = Node(NftSerialiser(4, marks), policies(50))
    table = NftTable("ip", "calico", runner)
    for builtin, spec in HOOKS.items():
        table.set_base_chain(BaseChain(f"filter-{builtin}", spec, node.render.hooks()[builtin]))
    chains = node.static() + [c for i in everyone for c in node.endpoint(i)]
    table.set_chains(chains + node.dispatch(everyone))
    rules = sum(len(c.rules) for c in chains)
    return table, rules, ["nft", "-a", "list", "table", "ip", "calico"], listed_chains


def _iptables(runner: ProcessRunner, marks: Marks, everyone: range, backend: str) -> Setup:
    node = Node(IptablesSerialiser(marks), policies(50))
    commands = IptablesCommands.for_backend(backend.removeprefix("iptables-"), 4)
    table = Table("filter", 4, runner, commands)
    for builtin, hook in node.render.hooks().items():
        table.set_hooks(builtin, hook)
    chains = node.static() + [c for i in everyone for c in node.endpoint(i)]
    table.set_chains(chains + node.dispatch(everyone))
    rules = sum(len(c.rules) for c in chains)
    return table, rules, [*commands.save, "-t", "filter"], partial(saved_chains, "filter", "cali-")


async def _run(backend: str, endpoints: int, refreshes: int) -> list[str]:
    runner = ProcessRunner()
    marks = Marks.from_mask(Config().iptables_mark_mask)
    everyone = range(endpoints)
    setup = _nft(runner, marks, everyone) if backend == "nft" else None
    table, rules, read, parse = setup or _iptables(runner, marks, everyone, backend)
    await table.apply()
    HeapFreezer(time.monotonic).after_apply()  # as the driver does after an apply
    took: list[float] = []
    lags: list[float] = []
    done = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_lagging, lags, done)
        for _ in range(refreshes):
            # What the platform's refresher does when the timer fires, beside
            # the applies; the apply after it neither reads nor writes.
            start = time.perf_counter()
            assert not await table.refresh()  # nothing differs
            took.append(time.perf_counter() - start)
            assert not await table.apply()
        done.set()
    text = (await runner.run(read)).stdout
    control = []
    for _ in range(refreshes):
        start = time.perf_counter()
        parse(text)
        control.append(time.perf_counter() - start)
    return [
        backend,
        f"{rules:,}",
        f"{1000 * percentile(took, 50):.0f} ms",
        f"{1000 * max(lags):.1f} ms",
        f"{1000 * percentile(control, 50):.0f} ms",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--refreshes", type=int, default=20)
    parser.add_argument("--backends", default="nft,iptables-nft,iptables-legacy")
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        print_row(trio.run(_run, args.backend, args.endpoints, args.refreshes))
        return
    print(machine())
    print(f"{args.endpoints} endpoints, {args.refreshes} refreshes")
    argv = ["--endpoints", str(args.endpoints), "--refreshes", str(args.refreshes)]
    each_backend(__file__, HEADER, args.backends, argv, "dplag")


if __name__ == "__main__":
    main()
