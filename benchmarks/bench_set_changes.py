"""One member changed in a big IP set on nftables: what it costs, by set size.

A new pod's address joins every IP set whose selector matches it (its
namespace's, "all pods", a policy's): Felix sends one
``IPSetDeltaUpdate`` per set, and the driver writes the change. Here a
native set of ``--sizes`` members of each kind (addresses; address,
protocol and port; prefixes) is made in a throwaway namespace by the
driver's own sets programmer (``nftables/sets.py``, the real element
writer and reader), then ``--changes`` times one member is added and
another removed, each followed by the apply's set step
(``apply_updates``), timed from the update to its return: the work of
the loop and the kernel's commit of the two elements. The first change
after the set was made is shown apart: a set keeps its items only once
it has changed (``nftables/wanted_set.py``), so that one works them out
whole.

The floor is the kernel's part alone: the transaction each change
wrote, undone and written again through the element writer, with
nothing worked out. The issue's goal: one change costs the same at any size.

Usage (root, nft): python benchmarks/bench_set_changes.py
    [--sizes 1000,10000,100000] [--changes 50]
It re-executes itself inside the namespace it creates.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trio

from benchmarks._common import machine, markdown_table, percentile, run_inside_netns
from dataplane.linux.kernel.cmd import ProcessRunner
from dataplane.linux.nftables.elements import ElementChange, ElementWriter
from dataplane.linux.nftables.nfnetlink import netfilter_socket
from dataplane.linux.nftables.reader import TableReader
from dataplane.linux.nftables.sets import NftSets
from dataplane.model import IPSet, IPSetType

_MEMBER: dict[IPSetType, Callable[[int], str]] = {
    IPSetType.IP: lambda c: f"10.{(c >> 16) & 255}.{(c >> 8) & 255}.{c & 255}",
    IPSetType.IP_AND_PORT: lambda c: (
        f"10.{(c >> 16) & 255}.{(c >> 8) & 255}.{c & 255},tcp:{8000 + c % 50}"
    ),
    IPSetType.NET: lambda c: f"{100 + ((c >> 16) & 15)}.{(c >> 8) & 255}.{c & 255}.0/24",
}


class _Recording:
    """The element writer, keeping the last transaction it was given."""

    def __init__(self, writer: ElementWriter) -> None:
        self.writer = writer
        self.last: list[ElementChange] = []

    def __call__(self, changes: Iterable[ElementChange]) -> None:
        self.last = list(changes)
        self.writer(self.last)


def _inverse(batch: list[ElementChange]) -> list[ElementChange]:
    """What undoes ``batch`` (its deletes first, as the driver writes them)."""
    undo = {"add": "delete", "delete": "add"}
    flipped = [replace(c, op=undo[c.op]) for c in batch]
    return [c for c in flipped if c.op == "delete"] + [c for c in flipped if c.op == "add"]


def _measure(kind: IPSetType, size: int, changes: int) -> list[str]:
    writer = _Recording(ElementWriter(netfilter_socket))
    sets = NftSets(ProcessRunner(None), writer, TableReader(netfilter_socket), {4: "calico"})
    member = _MEMBER[kind]
    set_id = f"bench-{kind.name.lower()}-{size}"
    sets.replace(IPSet(set_id, kind, frozenset(member(c) for c in range(size))))
    trio.run(sets.apply_updates)
    ours, floor = [], []
    for k in range(changes + 1):
        started = time.perf_counter()
        sets.update_members(set_id, frozenset({member(size + k)}), frozenset({member(k)}))
        trio.run(sets.apply_updates)
        ours.append(time.perf_counter() - started)
        # The kernel's part: the same transaction undone and done again.
        done = writer.last
        for batch in (_inverse(done), done):
            started = time.perf_counter()
            writer.writer(batch)
            floor.append(time.perf_counter() - started)
    # The first change after the set was made works its items out whole
    # (a set keeps them only once it changes): apart from the others.
    first, ours = ours[0], ours[1:]
    ms = [f"{percentile(x, q) * 1000:.2f}" for x in (ours, floor) for q in (50, 99)]
    return [
        kind.name,
        f"{size:,}",
        f"{first * 1000:.1f}",
        f"{ms[0]} / {ms[1]}",
        f"{ms[2]} / {ms[3]}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.inside:
        print(machine())
        run_inside_netns(
            __file__, ["--sizes", args.sizes, "--changes", str(args.changes)], "dpsetch"
        )
        return
    gc.freeze()  # as the driver does after its first apply (core/heap.py)
    rows = [
        _measure(kind, int(size), args.changes)
        for kind in (IPSetType.IP, IPSetType.IP_AND_PORT, IPSetType.NET)
        for size in args.sizes.split(",")
    ]
    header = ["kind", "members", "first change, ms", "the changes after it, p50 / p99 ms", "floor"]
    print(markdown_table(header, rows), flush=True)


if __name__ == "__main__":
    main()
