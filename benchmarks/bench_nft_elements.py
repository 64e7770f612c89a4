"""One service backend changed on nftables: our element writer against ``nft -f``.

The services layout of ``docs/nftables.md`` is loaded with one ``nft -f``
in a throwaway namespace: ``--services`` frontends x ``--backends``
backends in a map keyed by frontend and slot, every frontend in the set of
its backend count, one ``dnat`` rule per count. Then ``--changes`` times
one backend is replaced (its element deleted and the new one added, one
transaction), alternately through

* **the element writer** (``dataplane/linux/nftables/elements.py``): one
  ``send`` of the batch from this process, answers read back;
* **nft -f**: the same two lines through the tool, as a backend driving
  ``nft`` for every change would (a process start, its cache fetch, the
  commit);

and then, through the writer, transactions that only add an element and
transactions that only delete one: what the kernel's commit costs by
itself for each.

Each change is timed from the call to its return and checked: the map's
element holds the new backend afterwards (``nft get element``, untimed).
The issue's goal: one backend change p99 <= 15 ms at 5,000 services.

Measured 2026-11-24 on 2 cores, kernel 6.18, nft 1.0.6, defaults: 50,000
elements loaded in 1.01 s; one backend replaced 14.6 / 41.8 ms (p50 / p99)
through the writer, 18.6 / 35.7 ms through nft -f; an add-only transaction
0.03 / 0.11 ms, a delete-only one 15.7 / 31.9 ms: the kernel's commit of
a deletion is the floor (docs/nftables.md).

Usage (root, nft installed): python benchmarks/bench_nft_elements.py
    [--services N] [--backends N] [--changes N]
It re-executes itself inside the namespace it creates.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine, markdown_table, percentile, run_inside_netns
from dataplane.linux.nftables.elements import (
    NFPROTO_IPV4,
    Element,
    ElementChange,
    ElementWriter,
    addr,
    integer,
    port,
    proto,
)

TABLE, MAP = "dp-svc", "backends"


def vip(i: int) -> str:
    return f"10.96.{i // 250}.{i % 250 + 1}"


def backend(k: int) -> str:
    return f"10.{64 + k // 65536}.{(k // 256) % 256}.{k % 256}"


def ruleset(services: int, backends: int) -> str:
    counts = range(1, max(backends, 16) + 1)
    lines = [
        f"table ip {TABLE} {{",
        f"  map {MAP} {{",
        "    typeof ip daddr . meta l4proto . th dport . numgen random mod 2 : ip daddr . th dport",
        "    size 1000000",
        "  }",
    ]
    lines += [
        f"  set fe_{c} {{ typeof ip daddr . meta l4proto . th dport; size 100000; }}"
        for c in counts
    ]
    lines += [
        "  chain prerouting {",
        "    type nat hook prerouting priority dstnat; policy accept;",
    ]
    lines += [
        f"    meta l4proto {{ tcp, udp, sctp }} ip daddr . meta l4proto . th dport @fe_{c}"
        f" dnat ip to ip daddr . meta l4proto . th dport . numgen random mod {c} map @{MAP}"
        for c in counts
    ]
    lines += ["  }", "}"]
    elements = [
        f"{vip(i)} . tcp . 80 . {j} : {backend(i * backends + j + 1)} . 8080"
        for i in range(services)
        for j in range(backends)
    ]
    frontends = [f"{vip(i)} . tcp . 80" for i in range(services)]
    for name, values in ((MAP, elements), (f"fe_{backends}", frontends)):
        for start in range(0, len(values), 2000):
            chunk = ", ".join(values[start : start + 2000])
            lines.append(f"add element ip {TABLE} {name} {{ {chunk} }}")
    return "\n".join(lines) + "\n"


def _element(service: int, slot: int, to: str) -> Element:
    key = (addr(vip(service)), proto(6), port(80), integer(slot))
    return Element(key, (addr(to), port(8080)))


def _text(service: int, slot: int, to: str | None = None) -> str:
    key = f"{vip(service)} . tcp . 80 . {slot}"
    return key if to is None else f"{key} : {to} . 8080"


def inside(services: int, backends: int, changes: int) -> None:
    started = time.perf_counter()
    subprocess.run(["nft", "-f", "-"], input=ruleset(services, backends).encode(), check=True)
    loaded = time.perf_counter() - started
    held = {(i, j): backend(i * backends + j + 1) for i in range(services) for j in range(backends)}
    writer = ElementWriter()
    times: dict[str, list[float]] = {"element writer": [], "nft -f": []}
    for n in range(changes):
        service, slot = (n * 7919) % services, n % backends
        old, new = held[(service, slot)], backend(10_000_000 + n)
        how = "element writer" if n % 2 == 0 else "nft -f"
        begin = time.perf_counter()
        if how == "element writer":
            writer(
                [
                    ElementChange(
                        "delete", NFPROTO_IPV4, TABLE, MAP, (_element(service, slot, old),)
                    ),
                    ElementChange("add", NFPROTO_IPV4, TABLE, MAP, (_element(service, slot, new),)),
                ]
            )
        else:
            script = (
                f"delete element ip {TABLE} {MAP} {{ {_text(service, slot)} }}\n"
                f"add element ip {TABLE} {MAP} {{ {_text(service, slot, new)} }}\n"
            )
            subprocess.run(["nft", "-f", "-"], input=script.encode(), check=True)
        times[how].append(time.perf_counter() - begin)
        held[(service, slot)] = new
        got = subprocess.run(
            ["nft", "get", "element", "ip", TABLE, MAP, f"{{ {_text(service, slot)} }}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert f": {new} . 8080" in got, got
    # What the kernel's commit costs by itself: a transaction that only adds,
    # and one that only deletes (new frontends in the count-1 set, then gone).
    for how, op in (("writer, add only", "add"), ("writer, delete only", "delete")):
        times[how] = []
        for n in range(changes // 2):
            element = Element((addr(f"10.97.{n // 250}.{n % 250 + 1}"), proto(6), port(80)))
            begin = time.perf_counter()
            writer([ElementChange(op, NFPROTO_IPV4, TABLE, "fe_1", (element,))])
            times[how].append(time.perf_counter() - begin)
    print(machine())
    print(
        f"{services:,} services x {backends} backends ({services * backends:,} map elements)"
        f" loaded by one nft -f in {loaded:.2f} s; {changes} backend changes, alternating\n"
    )
    rows = [
        [
            how,
            str(len(values)),
            f"{percentile(values, 50) * 1e3:.2f} ms",
            f"{percentile(values, 99) * 1e3:.2f} ms",
        ]
        for how, values in times.items()
    ]
    print(markdown_table(["how", "transactions", "p50", "p99"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--services", type=int, default=5000)
    parser.add_argument("--backends", type=int, default=10)
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args.services, args.backends, args.changes)
        return
    argv = ["--services", str(args.services), "--backends", str(args.backends)]
    run_inside_netns(__file__, [*argv, "--changes", str(args.changes)], "dpnftbench")


if __name__ == "__main__":
    main()
