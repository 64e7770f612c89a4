"""Does scraping the driver's metrics every 100 ms delay its applies?

Acceptance (issue 24): scraping ``/metrics`` every 100 ms during a
5,000-endpoint burst delays no apply by more than 5 %.

Measured 2026-11-24 on 2 cores, nft, defaults, 4 runs each (17 min), the
policy counters read every 30 s in a thread of their own and never during
an apply: burst (first byte -> DataplaneInSync, one apply) 92.3 s without
scraping, 82.9 s with (0.90x); one endpoint added, p50 509 ms vs 464 ms
(0.91x): met. Runs of one condition spread 11-16 %, more than the 5 %
judged; an earlier session's 3 runs each measured 1.08x (spreads 2-4 %).
``bench_scrape_cost.py`` measures the cost itself, which bounds the delay
(0.82 % of one core for a scraper every 100 ms). Scrapes: p50 1.6 ms, p99
107 ms, 13.8 KB per response.

A real driver (``driver.py --platform linux --listen 127.0.0.1:PORT``, on
Felix's pipes, fds 3 and 4, played by ``tests/felix_harness.py``) programs
a fresh node namespace holding one veth per endpoint (as
``bench_linux.py`` makes them, peers in a namespace of their own). Each
run writes the generated node (``benchmarks/_node.py``: ``--endpoints``
endpoints, ``--policies`` policies in two tiers, ``--sets`` IP sets with
``--members`` members, ending with InSync) as one burst, then adds
``--additions`` endpoints one at a time (spare interfaces, 0-100 ms
apart). Two conditions, alternated (ABBA...), ``--runs`` runs each, every
run in a namespace of its own:

* **no scraping**: the HTTP server is up, nobody asks it anything;
* **scraping every 100 ms**: a scraper GETs ``/metrics`` (and ``/state``
  with ``--state``) every ``--interval`` seconds from just before the
  first frame is written until after the last addition.

The scraper is a child process of this script started with ``ip netns
exec`` (the server binds the node namespace's loopback); it also makes the
two control scrapes of every run, in both conditions, when nothing is
being measured: right after DataplaneInSync and after the last addition.

Measured per run:

1. **burst**: from the first byte written to DataplaneInSync's arrival;
2. the burst's **applies as the driver reports them**:
   ``dataplane_apply_duration_seconds`` count and sum (and
   ``felix_int_dataplane_apply_time_seconds``, the same durations under
   Felix's name), the phases of ``dataplane_phase_duration_seconds``, read
   by the control scrape after DataplaneInSync;
3. **additions**: each ``WorkloadEndpointUpdate`` written until its
   ``WorkloadEndpointStatusUpdate`` arrives; p50 / p99 pooled over the
   runs, and the driver's own apply durations over the additions (the
   difference of the two control scrapes);
4. the scraper's view: scrapes made, each one's latency (connect to last
   byte), bytes per response.

The node is ``bench_linux.py``'s generator at 5,000 endpoints with the
policies and IP sets of its ``--quick`` node (20, 50 with 10,000
members): the endpoints are the burst. (With the benchmark node's 200 policies (docs/benchmarks.md)
and 100,000 members the one apply takes as long here, ≈ 110 s: at 5,000
endpoints the per-endpoint programming dominates.)

The comparison is the same node without scraping (medians over the runs);
the goal is a ratio ≤ 1.05 for the burst and for the additions' p50. On 2
cores the driver, its ``iptables-restore`` children, the scraper and this
process share the CPUs, as a node's processes would.

Needs root, ``ip``, ``ipset`` and the iptables backend given; every
namespace it creates is deleted at the end, also on error, Ctrl-C or
SIGTERM.

Usage: python benchmarks/bench_scrape.py [--quick] [--runs N] [--endpoints N]
       [--policies N] [--sets N] [--members N] [--additions N] [--state]
       [--interval SECONDS] [--backend legacy|nft] [--policy-counters-interval S]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine, markdown_table, percentile
from benchmarks._node import NodeBuilder, Sizes, veth_node
from benchmarks._runs import apply_quick, child_argv
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.msglog import build_log
from testbed.topology import Topology, sigterm_unwinds
from tests.felix_harness import FelixHarness

SCRIPT = Path(__file__).resolve()
GOAL_RATIO = 1.05
NONE, SCRAPE = "no scraping", "scraping"
APPLY = "dataplane_apply_duration_seconds"
FELIX_APPLY = "felix_int_dataplane_apply_time_seconds"
PHASE = "dataplane_phase_duration_seconds"


# ---------------------------------------------------------------------------
# The scraper (child side, inside the node namespace).
# ---------------------------------------------------------------------------


def _get(port: int, path: str, timeout: float) -> tuple[int, bytes, float]:
    """One GET on a new connection (the server speaks HTTP/1.0): status, body, seconds."""
    start = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    return response.status, body, time.perf_counter() - start


def _samples(text: str) -> dict[str, float]:
    """Every sample of an exposition but histogram buckets, keyed ``name{k=v,...}``."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                continue
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


class _Periodic:
    """The scrapes made on the clock, and what each cost."""

    def __init__(self, port: int, paths: list[str], timeout: float) -> None:
        self.port, self.paths, self.timeout = port, paths, timeout
        self.latencies: dict[str, list[float]] = {p: [] for p in paths}
        self.sizes: dict[str, list[int]] = {p: [] for p in paths}
        self.errors: list[str] = []
        self.skipped_ticks = 0

    def scrape(self) -> None:
        for path in self.paths:
            try:
                status, body, seconds = _get(self.port, path, self.timeout)
            except OSError as exc:
                self.errors.append(f"{path}: {exc}")
                continue
            if status != 200:
                self.errors.append(f"{path}: HTTP {status}")
            self.latencies[path].append(seconds)
            self.sizes[path].append(len(body))


def child_scrape(args: argparse.Namespace) -> None:
    """Serve the parent's commands, one line each, on stdin; answer one JSON line each.

    ``ping`` (wait until the server answers), ``start`` (scrape every
    ``--interval`` from now on), ``metrics`` (one control scrape, its
    samples), ``finish`` or end of input (the periodic scrapes' figures).
    """
    paths = ["/metrics", "/state"] if args.state else ["/metrics"]
    periodic = _Periodic(args.port, paths, args.timeout)
    next_tick: float | None = None
    pending = b""

    def answer(body: object) -> None:
        sys.stdout.write(json.dumps(body) + "\n")
        sys.stdout.flush()

    while True:
        while b"\n" not in pending:
            wait = None if next_tick is None else max(0.0, next_tick - time.monotonic())
            ready, _, _ = select.select([0], [], [], wait)
            if ready:
                chunk = os.read(0, 4096)
                pending += chunk if chunk else b"finish\n"
                continue
            if next_tick is not None:
                periodic.scrape()
                # A fixed rate, as Prometheus keeps: ticks missed while a scrape
                # ran are skipped, not made up.
                next_tick += args.interval
                while next_tick <= time.monotonic():
                    next_tick += args.interval
                    periodic.skipped_ticks += 1
        line, pending = pending.split(b"\n", 1)
        command = line.decode().strip()
        if command == "ping":
            deadline = time.monotonic() + args.timeout
            while True:
                try:
                    status, _, _ = _get(args.port, "/livez", args.timeout)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            answer({"livez": status})
        elif command == "start":
            next_tick = time.monotonic()
            answer({"started": True})
        elif command == "metrics":
            status, body, seconds = _get(args.port, "/metrics", args.timeout)
            answer({"status": status, "seconds": seconds, "samples": _samples(body.decode())})
        elif command == "finish":
            answer(
                {
                    "latencies": periodic.latencies,
                    "sizes": periodic.sizes,
                    "errors": periodic.errors,
                    "skipped_ticks": periodic.skipped_ticks,
                }
            )
            return
        else:
            raise SystemExit(f"scraper: unknown command {command!r}")


# ---------------------------------------------------------------------------
# One run (parent side).
# ---------------------------------------------------------------------------


class Scraper:
    """The scraper child in the node namespace, driven over its stdin and stdout."""

    def __init__(self, netns: str, args: argparse.Namespace) -> None:
        argv = ["--child", "scrape", "--port", str(args.port), "--interval", str(args.interval)]
        argv += ["--timeout", str(args.timeout)] + (["--state"] if args.state else [])
        self.proc = subprocess.Popen(
            child_argv(netns, SCRIPT, argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self._buf = b""
        self.timeout = args.timeout

    def ask(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{command}\n".encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + self.timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(0.0, remaining))
            if not ready:
                raise TimeoutError(f"the scraper did not answer {command!r}")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"the scraper exited ({self.proc.wait()}) on {command!r}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        return answer

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _is(kind: str) -> Callable[[pb.FromDataplane], bool]:
    return lambda envelope: envelope.WhichOneof("payload") == kind


def _status_of(workload_id: str) -> Callable[[pb.FromDataplane], bool]:
    def match(envelope: pb.FromDataplane) -> bool:
        return (
            envelope.HasField("workload_endpoint_status_update")
            and envelope.workload_endpoint_status_update.id.workload_id == workload_id
        )

    return match


def _write(felix: FelixHarness, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(felix.to_driver, view) :]


def _apply_figures(samples: dict[str, float]) -> dict[str, float]:
    """What the driver says of its applies (cumulative since it started)."""
    out = {
        "applies": samples.get(f"{APPLY}_count", 0.0),
        "apply_s": samples.get(f"{APPLY}_sum", 0.0),
        "felix_applies": samples.get(f"{FELIX_APPLY}_count", 0.0),
        "felix_apply_s": samples.get(f"{FELIX_APPLY}_sum", 0.0),
        "failures": samples.get("felix_int_dataplane_failures_total", 0.0),
    }
    for phase in ("decode", "complete", "program"):
        out[f"{phase}_s"] = samples.get(f"{PHASE}_sum{{phase={phase}}}", 0.0)
    return out


def settle(topo: Topology, timeout: float) -> float:
    """Wait until the kernel has torn down the last run's namespaces; the seconds waited.

    ``ip netns del`` returns at once, but the kernel unregisters the
    thousands of veths afterwards, holding the locks that creating a
    namespace and the driver's netlink writes need: a run started then
    would time out creating its namespace, or measure the teardown. So
    create and delete a probe namespace until creating one is quick again.
    The probe carries the topology's prefix: a leftover is swept on exit.
    """
    start = time.perf_counter()
    probe = f"{topo.prefix}ffwait"
    while True:
        before = time.perf_counter()
        for verb in ("add", "del"):
            subprocess.run(
                ["ip", "netns", verb, probe], check=True, capture_output=True, timeout=timeout
            )
        if time.perf_counter() - before < 0.5:
            return time.perf_counter() - start
        time.sleep(1.0)


def one_run(
    topo: Topology,
    args: argparse.Namespace,
    scraping: bool,
    snapshot: bytes,
    additions: list[pb.WorkloadEndpointUpdate],
) -> dict[str, Any]:
    links = args.endpoints + args.additions
    settled_s = settle(topo, args.timeout)
    with (
        tempfile.TemporaryDirectory(prefix="bench-scrape-") as tmp,
        veth_node(topo, "scr", links) as (netns, setup_s),
    ):
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        felix = FelixHarness(
            "--platform",
            "linux",
            "--listen",
            f"127.0.0.1:{args.port}",
            # Not the host's /var/lib/dataplane: this node is a throwaway namespace.
            "--sysctl-state",
            str(Path(tmp) / "sysctls.json"),
            "--policy-counters-interval",
            str(args.policy_counters_interval),
            netns=netns,
        )
        felix.watch()
        scraper = Scraper(netns, args)
        try:
            deadline = time.monotonic() + args.timeout
            while "starting, platform" not in felix.stderr_so_far():
                if time.monotonic() > deadline or felix.proc.poll() is not None:
                    raise RuntimeError(f"the driver did not start:\n{felix.stderr_so_far()}")
                time.sleep(0.01)
            scraper.ask("ping")
            if scraping:
                scraper.ask("start")
            # The burst: the whole node, then InSync.
            start = time.monotonic()
            _write(felix, snapshot)
            written = time.monotonic()
            in_sync_at, _ = felix.wait_for(_is("dataplane_in_sync"), timeout=args.timeout)
            up = sum(
                1
                for _, e in felix.received
                if e.HasField("workload_endpoint_status_update")
                and e.workload_endpoint_status_update.status.status == "up"
            )
            after_burst = scraper.ask("metrics")
            # One endpoint at a time, spread out so they meet the scrapes at any phase.
            rng = random.Random(3)
            latencies = []
            for i, update in enumerate(additions):
                time.sleep(rng.uniform(0.0, 0.1))
                since = len(felix.received)
                sent = time.monotonic()
                _write(felix, build_log([update], first_seq=10**6 + i))
                arrived, _ = felix.wait_for(
                    _status_of(update.id.workload_id), since=since, timeout=args.timeout
                )
                latencies.append(arrived - sent)
            at_end = scraper.ask("metrics")
            scrapes = scraper.ask("finish")
            felix.close_input()
            code, err = felix.wait(timeout=args.timeout)
            if code != 0:
                raise RuntimeError(f"driver exit {code}:\n{err[-2000:]}")
        finally:
            scraper.stop()
            if felix.proc.poll() is None:
                felix.kill()
    burst = _apply_figures(after_burst["samples"])
    end = _apply_figures(at_end["samples"])
    return {
        "condition": SCRAPE if scraping else NONE,
        "setup_s": setup_s,
        "settled_s": settled_s,
        "burst_s": in_sync_at - start,
        "write_s": written - start,
        "endpoints_up": up,
        "burst": burst,
        "additions": {k: end[k] - burst[k] for k in end},
        "latencies_s": latencies,
        "scrapes": scrapes,
        "control_scrape_s": [after_burst["seconds"], at_end["seconds"]],
    }


# ---------------------------------------------------------------------------
# Report (parent side).
# ---------------------------------------------------------------------------


def _ratio(a: float, b: float) -> str:
    return f"{b / a:.3f}" if a else "-"


def _verdict(ratio: float) -> str:
    return "met" if ratio <= GOAL_RATIO else "NOT met"


def _mean_apply(figures: dict[str, float]) -> float:
    return figures["apply_s"] / figures["applies"] if figures["applies"] else float("nan")


def report(results: list[dict[str, Any]], args: argparse.Namespace, elapsed: float) -> None:
    by = {c: [r for r in results if r["condition"] == c] for c in (NONE, SCRAPE)}
    a, b = by[NONE], by[SCRAPE]
    lat_a = [x * 1000 for r in a for x in r["latencies_s"]]
    lat_b = [x * 1000 for r in b for x in r["latencies_s"]]
    paths = "/metrics and /state" if args.state else "/metrics"
    print()
    print(
        f"Node: {args.endpoints:,} workload endpoints (veth), {args.policies} policies,"
        f" {args.sets} IP sets with {args.members:,} members, iptables {args.backend};"
        f" then {args.additions} single-endpoint additions. {args.runs} run(s) per condition,"
        f" alternated; scraper: {paths} every {args.interval * 1000:.0f} ms;"
        f" driver --policy-counters-interval {args.policy_counters_interval:g}."
    )
    print(f"Machine: {machine()}")
    print()

    rows: list[list[str]] = []

    def row(label: str, fa: float, fb: float, unit: str, digits: int = 3) -> None:
        rows.append([label, f"{fa:.{digits}f} {unit}", f"{fb:.{digits}f} {unit}", _ratio(fa, fb)])

    def med(res: list[dict[str, Any]], f: Callable[[dict[str, Any]], float]) -> float:
        return statistics.median(f(r) for r in res)

    burst_a, burst_b = med(a, lambda r: r["burst_s"]), med(b, lambda r: r["burst_s"])
    row("burst: first byte → DataplaneInSync", burst_a, burst_b, "s")
    rows.append(
        [
            "burst: applies (driver's count)",
            f"{med(a, lambda r: r['burst']['applies']):.0f}",
            f"{med(b, lambda r: r['burst']['applies']):.0f}",
            "-",
        ]
    )
    row(
        f"burst: apply time, sum of `{APPLY}`",
        med(a, lambda r: r["burst"]["apply_s"]),
        med(b, lambda r: r["burst"]["apply_s"]),
        "s",
    )
    row(
        "burst: mean apply (sum / count)",
        med(a, lambda r: _mean_apply(r["burst"])),
        med(b, lambda r: _mean_apply(r["burst"])),
        "s",
    )
    for phase in ("decode", "complete", "program"):
        key = f"{phase}_s"
        row(
            f"burst: phase `{phase}`, sum",
            statistics.median(r["burst"][key] for r in a),
            statistics.median(r["burst"][key] for r in b),
            "s",
        )
    p50_a, p50_b = percentile(lat_a, 50), percentile(lat_b, 50)
    row(f"add one endpoint, p50 (of {len(lat_a)} / {len(lat_b)})", p50_a, p50_b, "ms", 1)
    row("add one endpoint, p99", percentile(lat_a, 99), percentile(lat_b, 99), "ms", 1)
    row(
        "additions: mean apply (driver's, sum / count)",
        med(a, lambda r: _mean_apply(r["additions"]) * 1000),
        med(b, lambda r: _mean_apply(r["additions"]) * 1000),
        "ms",
        1,
    )
    print("Medians over the runs (latencies pooled over the runs):")
    print()
    print(
        markdown_table(
            ["metric", NONE, f"scraping every {args.interval * 1000:.0f} ms", "ratio"], rows
        )
    )
    print()
    burst_ratio, add_ratio = burst_b / burst_a, p50_b / p50_a
    print(
        f"Goal (issue 24), scraping delays no apply by more than 5 %: burst {burst_ratio:.3f}"
        f" ({_verdict(burst_ratio)}); one endpoint's p50 {add_ratio:.3f} ({_verdict(add_ratio)})."
    )
    spread = []
    for name, res in ((NONE, a), (SCRAPE, b)):
        bursts = [r["burst_s"] for r in res]
        p50s = [percentile([x * 1000 for x in r["latencies_s"]], 50) for r in res]
        spread.append(max(bursts) / min(bursts) - 1)
        print(
            f"  {name}: burst {min(bursts):.3f}-{max(bursts):.3f} s over the runs"
            f" (spread {spread[-1] * 100:.0f} %),"
            f" per-run add p50 {min(p50s):.1f}-{max(p50s):.1f} ms"
        )
    if max(spread) > GOAL_RATIO - 1:
        print(
            f"  The runs of one condition differ by up to {max(spread) * 100:.0f} %, more than"
            " the 5 % goal: a verdict of met says no slowdown beyond that noise was seen,"
            " not that one under 5 % was resolved (more --runs narrow it)."
        )
    print()
    print("Scraper's view (scraping runs, from just before the burst to after the additions):")
    for path in ["/metrics", "/state"] if args.state else ["/metrics"]:
        lat = [x * 1000 for r in b for x in r["scrapes"]["latencies"][path]]
        sizes = [x for r in b for x in r["scrapes"]["sizes"][path]]
        counts = [len(r["scrapes"]["latencies"][path]) for r in b]
        if not lat:
            print(f"  {path}: no scrapes")
            continue
        print(
            f"  {path}: {sum(counts)} scrapes ({', '.join(map(str, counts))} per run);"
            f" latency p50 {percentile(lat, 50):.1f} ms, p99 {percentile(lat, 99):.1f} ms,"
            f" max {max(lat):.1f} ms; {statistics.median(sizes):,.0f} bytes per response"
            f" (min {min(sizes):,}, max {max(sizes):,})"
        )
    skipped = sum(r["scrapes"]["skipped_ticks"] for r in b)
    errors = [e for r in b for e in r["scrapes"]["errors"]]
    print(f"  ticks skipped (a scrape overran the interval): {skipped}; errors: {len(errors)}")
    for e in errors[:5]:
        print(f"    {e}")
    print()
    print("Per run:")
    per_run = [
        [
            str(i + 1),
            r["condition"],
            f"{r['burst_s']:.3f}",
            f"{r['burst']['applies']:.0f} / {r['burst']['apply_s']:.3f}",
            f"{r['burst']['felix_applies']:.0f} / {r['burst']['felix_apply_s']:.3f}",
            f"{r['endpoints_up']}",
            f"{percentile([x * 1000 for x in r['latencies_s']], 50):.1f}"
            f" / {percentile([x * 1000 for x in r['latencies_s']], 99):.1f}",
            f"{r['additions']['applies']:.0f}",
            str(len(r["scrapes"]["latencies"]["/metrics"])),
            f"{r['settled_s']:.1f} / {r['setup_s']:.1f}",
        ]
        for i, r in enumerate(results)
    ]
    header = [
        "run",
        "condition",
        "burst (s)",
        f"burst applies / s (`{APPLY}`)",
        f"(`{FELIX_APPLY}`)",
        "endpoints up at in-sync",
        "add p50 / p99 (ms)",
        "applies during additions",
        "/metrics scrapes",
        "waited for the last teardown / veth setup (s)",
    ]
    print(markdown_table(header, per_run))
    failures = sum(r["burst"]["failures"] + r["additions"]["failures"] for r in results)
    print(f"\napply failures: {failures:.0f}; whole run: {elapsed:.1f} s")


# ---------------------------------------------------------------------------
# Main.
# ---------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--endpoints", type=int, default=5000)
    parser.add_argument("--policies", type=int, default=20)
    parser.add_argument("--sets", type=int, default=50)
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--additions", type=int, default=20, help="endpoints added one by one")
    parser.add_argument("--runs", type=int, default=3, help="runs per condition")
    parser.add_argument("--interval", type=float, default=0.1, help="scrape interval, seconds")
    parser.add_argument("--state", action="store_true", help="scrape /state too, every interval")
    parser.add_argument("--backend", default="nft", choices=["legacy", "nft"])
    parser.add_argument("--port", type=int, default=9400, help="the driver's --listen port")
    parser.add_argument(
        "--policy-counters-interval",
        type=float,
        default=30.0,
        help="the driver's --policy-counters-interval (0: no iptables-save -c at all)",
    )
    parser.add_argument("--timeout", type=float, default=600, help="per step, seconds")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="500 endpoints, 1 run (unless given)",
    )
    parser.add_argument("--child", choices=["scrape"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    apply_quick(args, {"endpoints": 500, "runs": 1})
    return args


def main() -> None:
    args = parse_args()
    if args.child == "scrape":
        child_scrape(args)
        return
    if os.geteuid() != 0:
        print("needs root (network namespaces, iptables, ipset)", file=sys.stderr)
        sys.exit(2)
    sizes = Sizes(args.endpoints, args.policies, args.sets, args.members, args.additions)
    started = time.perf_counter()
    builder = NodeBuilder(sizes, args.backend)
    snapshot = build_log(builder.snapshot())
    additions = [m for m in builder.additions() if isinstance(m, pb.WorkloadEndpointUpdate)]
    print(
        f"generated the node's messages ({len(snapshot) / 1e6:.1f} MB) in"
        f" {time.perf_counter() - started:.2f} s",
        flush=True,
    )
    results = []
    with sigterm_unwinds(), Topology() as topo:
        for i in range(args.runs):
            # ABBA...: neither condition always runs first (a warmer cache, a fuller log).
            order = [False, True] if i % 2 == 0 else [True, False]
            for scraping in order:
                r = one_run(topo, args, scraping, snapshot, additions)
                lat = [x * 1000 for x in r["latencies_s"]]
                print(
                    f"[run {i + 1}, {r['condition']}] burst {r['burst_s']:.3f} s"
                    f" ({r['burst']['applies']:.0f} applies, {r['burst']['apply_s']:.3f} s);"
                    f" add p50 {percentile(lat, 50):.1f} ms p99 {percentile(lat, 99):.1f} ms;"
                    f" {len(r['scrapes']['latencies']['/metrics'])} scrapes;"
                    f" waited {r['settled_s']:.1f} s for the last teardown",
                    flush=True,
                )
                results.append(r)
    report(results, args, time.perf_counter() - started)


if __name__ == "__main__":
    main()
