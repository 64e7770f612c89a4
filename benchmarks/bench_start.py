"""Process start to first apply, with nothing to program (issue 48).

The driver is started the way Felix starts it (pipes on fds 3 and 4,
``tests/felix_harness.py``), in a network namespace holding nothing, and
given Felix's opening: a ConfigUpdate naming the node, then InSync. The
figure is from the moment the process is spawned until its
DataplaneInSync arrives on fd 4 (``--send-in-sync yes``): the interpreter,
the imports, the platform's construction, and the first apply, which on
Linux reads the kernel (tables, sets, links) and writes the driver's
empty chains or tables. Each start is a fresh process in a fresh
namespace, ``--runs`` times per platform; the table gives the median and
the slowest.

Beside it, from the driver's own log lines (wall clock, millisecond
resolution): *to the loop*, spawn until its first line (interpreter and
imports), and *first apply*, InSync received until DataplaneInSync is
back. The *floor* is the interpreter starting and exiting (``python -c
pass``), the least any Python driver pays.

The driver's modules are compiled to bytecode first, as every deployed
driver has them (``benchmarks/_common.py``: ``compile_bytecode``); the
figures before 2026-11-29 held their compiling from source at each start.

Run as root: ``python benchmarks/bench_start.py [--runs 10]``.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import compile_bytecode, machine, markdown_table, run_inside_netns
from benchmarks._runs import require_root
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.felix_harness import FelixHarness

_CASES = {
    "sim": ["--platform", "sim"],
    "linux, iptables": ["--platform", "linux", "--nftables-mode", "disabled"],
    "linux, nftables": ["--platform", "linux", "--nftables-mode", "enabled"],
}


def _log_time(line: str) -> float:
    return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def one_start(argv: list[str]) -> tuple[float, float, float]:
    """(spawn to DataplaneInSync, spawn to the first log line, InSync to DataplaneInSync)."""
    spawned = time.time()
    felix = FelixHarness(*argv, "--mtu-file", "none")
    felix.send(pb.ConfigUpdate(config={"FelixHostname": "node-1"}), pb.InSync())
    felix.recv_until("dataplane_in_sync")
    done = time.time()
    felix.close_input()
    code, stderr = felix.wait()
    if code != 0:
        raise RuntimeError(f"driver exited {code}: {stderr[-2000:]}")
    lines = stderr.splitlines()
    first = _log_time(lines[0])
    in_sync = next(_log_time(line) for line in lines if "InSync received" in line)
    return done - spawned, first - spawned, done - in_sync


def interpreter_floor(runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def inside(case: str, runs: int) -> None:
    starts = [one_start(_CASES[case]) for _ in range(runs)]
    total = [s[0] for s in starts]
    to_loop = statistics.median(s[1] for s in starts)
    apply = statistics.median(s[2] for s in starts)
    floor = interpreter_floor(runs)
    row = [
        case,
        f"{statistics.median(total):.3f} s",
        f"{max(total):.3f} s",
        f"{to_loop:.3f} s",
        f"{apply * 1000:.0f} ms",
        f"{floor:.3f} s",
        f"{statistics.median(total) / floor:.0f}x",
    ]
    print("| " + " | ".join(row) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--case", choices=sorted(_CASES), help="one case (default: all)")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args.case, args.runs)
        return
    require_root()
    compiled = compile_bytecode()
    print(machine())
    print(compiled)
    header = ["platform", "start to first apply, median", "slowest", "to the loop", "first apply"]
    print(markdown_table([*header, "floor: the interpreter", "ratio"], []), flush=True)
    for case in [args.case] if args.case else list(_CASES):
        run_inside_netns(__file__, ["--case", case, "--runs", str(args.runs)], "start")


if __name__ == "__main__":
    main()
