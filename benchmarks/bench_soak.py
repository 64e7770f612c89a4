"""Soak: a million messages of churn into a live Linux node; memory, latency, leaks.

Measured 2026-11-24 on 2 cores, nft, defaults (1,000,000 messages in 986 s):
RSS 57.1 MB loaded, 64.9 MB after warm-up, 70.6 MB at the end (+8.8 %, goal
<= 10 %); apply latency p50 798 ms in the 2nd tenth, 897 ms in the last
(1.12x, goal <= 1.2x); kernel state equal to a clean start. Before the memo,
index and table fixes: +52 % over 400,000 messages.

A real driver (the ``dataplane-driver`` console script, no arguments,
``DATAPLANE_PLATFORM=linux``, on Felix's pipes, fds 3 and 4) programs a
node in a fresh network namespace: ``--endpoints`` endpoints on veths (as
``bench_linux.py`` makes them, peers in a namespace of their own), spare
interfaces for pods that come and go, an uplink holding the VXLAN parent
address, ``--policies`` policies in two tiers, ``--sets`` IP sets,
``--services`` ClusterIP services and ``--remote-nodes`` remote nodes with
routed blocks (``benchmarks/_churn.py``). After the load it is fed
``--messages`` messages of churn in batches of ``--batch``: IP set deltas,
endpoint updates, adds, removes and moves, policy updates with new rule
values (and new selectors' sets), profile updates, service and backend
changes, route updates and removes, remote nodes leaving and joining.

Each batch ends with an update of a probe endpoint; the driver reports its
status only after an apply that took the whole batch, so the batch's
*apply latency* is from its last byte written until that status arrives,
and the next batch is written only then. Every ``--sample-every`` messages
the driver's RSS (``VmRSS`` of ``/proc/<pid>/status``) is read.

Verdicts:

* **RSS** after warm-up (the first 10 % of the messages) grows ≤ 10 % by
  the end;
* **latency** does not drift: the median of the last tenth of the batches
  is within 20 % of the second tenth's;
* **no leak** of kernel objects: at the end the node's state (``iptables-save``
  of both backends and both IP versions, every chain's rules in order,
  ``ipset save`` without the kernel's hash seed and sizing, the routes of
  protocol 80, the VXLAN device's neighbours and FDB entries, the
  endpoints' interface sysctls) equals what a fresh driver makes of a clean
  namespace given only the final desired state (``Churn.snapshot``). The
  sysctls of interfaces that hold no endpoint at the end are not compared:
  a real pod's veth goes with it, these stay for the next pod.

``--trace sim|linux`` finds what grows instead: the same churn through
:class:`~dataplane.core.loop.Dataplane` in this process (``linux``: a
child in the node namespace with a :class:`LinuxPlatform`; ``sim``: the
in-memory platform, which separates the managers' growth from the Linux
platform's) with ``tracemalloc``, printing the allocation sites that grew
most between the end of the warm-up and the end, and the converted-rule
memo's size and hit rate.

Needs root, ``ip``, ``bridge``, ``ipset``, ``conntrack`` and the iptables
backend given; every namespace it creates is deleted at the end, also on
error, Ctrl-C or SIGTERM.

Usage: python benchmarks/bench_soak.py [--messages N] [--batch N] [--endpoints N]
       [--backend legacy|nft] [--sample-every N] [--seed N] [--trace sim|linux]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from google.protobuf.message import Message

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._churn import PARENT_ADDRESS, PROBE, UPLINK, Churn, ChurnSizes
from benchmarks._common import machine, percentile
from benchmarks._node import veth_node
from benchmarks._runs import require_root, run_child
from benchmarks.bench_reliability import NodeState, parse_save, read_state
from benchmarks.bench_reliability import _sh as in_netns
from dataplane.core.loop import Dataplane
from dataplane.core.platform import Platform
from dataplane.managers import convert
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import FrameDecoder
from dataplane.wire.msglog import build_log
from testbed.topology import Topology, sigterm_unwinds
from tests.felix_harness import FelixHarness

SCRIPT = Path(__file__).resolve()
WARM_UP = 0.10  # of the messages
GOAL_RSS_GROWTH = 0.10
GOAL_LATENCY_DRIFT = 1.20
VXLAN_DEVICE = "vxlan.calico"


# ---------------------------------------------------------------------------
# The node.
# ---------------------------------------------------------------------------


@contextlib.contextmanager
def soak_node(topo: Topology, role: str, sizes: ChurnSizes) -> Iterator[str]:
    """The node's namespace: a veth per endpoint, spare and probe, and the uplink."""
    with veth_node(topo, role, sizes.links) as (netns, _):
        topo.add_veths(netns, [(UPLINK, f"{UPLINK}p")])
        batch = f"link set lo up\naddr add {PARENT_ADDRESS} dev {UPLINK}\n"
        subprocess.run(
            ["ip", "-n", netns, "-batch", "-"],
            input=batch.encode(),
            capture_output=True,
            check=True,
        )
        yield netns


@dataclass(frozen=True, slots=True)
class SoakState:
    """What ``read_state`` reads, plus the other iptables backend and the overlay's entries."""

    node: NodeState
    other_backend: dict[str, tuple[str, ...]]
    overlay: frozenset[str]

    def differences(self, other: SoakState) -> list[str]:
        out = self.node.differences(other.node)
        for key in sorted(self.other_backend.keys() | other.other_backend.keys()):
            if self.other_backend.get(key) != other.other_backend.get(key):
                out.append(f"other backend's chain {key} differs")
        out += [f"overlay entry {x} only here" for x in sorted(self.overlay - other.overlay)]
        out += [f"overlay entry {x} missing" for x in sorted(other.overlay - self.overlay)]
        return out

    def counts(self) -> str:
        chains = sum(1 for k in self.node.chains if k.split()[2].startswith("cali"))
        rules = sum(len(v) - 1 for v in self.node.chains.values())
        members = sum(len(m) for _, m in self.node.sets.values())
        return (
            f"{chains} of our chains, {rules} rules, {len(self.node.sets)} IP sets with"
            f" {members} members, {len(self.node.routes)} routes, {len(self.overlay)}"
            f" neighbour and FDB entries"
        )


def read_soak_state(netns: str, backend: str, ifaces: frozenset[str]) -> SoakState:
    other = "nft" if backend == "legacy" else "legacy"
    chains = parse_save("ip", in_netns(netns, f"iptables-{other}-save"))
    chains |= parse_save("ip6", in_netns(netns, f"ip6tables-{other}-save"))
    overlay = {
        "neigh " + json.dumps(n, sort_keys=True)
        for n in json.loads(
            in_netns(netns, "ip", "-j", "neigh", "show", "dev", VXLAN_DEVICE) or "[]"
        )
    }
    overlay |= {
        "fdb " + json.dumps(f, sort_keys=True)
        for f in json.loads(
            in_netns(netns, "bridge", "-j", "fdb", "show", "dev", VXLAN_DEVICE) or "[]"
        )
    }
    return SoakState(read_state(netns, backend, ifaces), chains, frozenset(overlay))


# ---------------------------------------------------------------------------
# The driver, as Felix runs it.
# ---------------------------------------------------------------------------


class Driver:
    """``dataplane-driver`` on Felix's pipes in ``netns``; what it says, with arrival times."""

    def __init__(self, netns: str, workdir: Path) -> None:
        env = {
            **os.environ,
            "DATAPLANE_PLATFORM": "linux",
            # Not the host's /var/lib/dataplane: this node is a throwaway namespace.
            "DATAPLANE_SYSCTL_STATE": str(workdir / f"{netns}.sysctls.json"),
        }
        program = [str(Path(sys.executable).parent / "dataplane-driver")]
        self.felix = FelixHarness(netns=netns, env=env, program=program)
        self.felix.watch()
        self._seq = 0

    def send(self, msgs: list[Message]) -> float:
        """Write every message (one frame each); when the last byte was written."""
        data = memoryview(build_log(msgs, first_seq=self._seq + 1))
        self._seq += len(msgs)
        while data:
            data = data[os.write(self.felix.to_driver, data) :]
        return time.monotonic()

    def forget(self) -> None:
        """Drop what arrived so far (a soak's statuses would fill this process)."""
        self.felix.received.clear()

    def wait(self, predicate: Callable[[pb.FromDataplane], bool], timeout: float) -> float:
        arrived, _ = self.felix.wait_for(predicate, timeout=timeout)
        return arrived

    def rss_kb(self) -> int:
        """The driver's resident set (``ip netns exec`` execs it: the pid is the driver's)."""
        status = Path(f"/proc/{self.felix.proc.pid}/status").read_text()
        return next(int(line.split()[1]) for line in status.splitlines() if line[:6] == "VmRSS:")

    def stop(self, timeout: float) -> str:
        self.felix.close_input()
        code, err = self.felix.wait(timeout=timeout)
        if code != 0:
            raise RuntimeError(f"driver exit {code}:\n{err[-2000:]}")
        return err


def in_sync(envelope: pb.FromDataplane) -> bool:
    return envelope.HasField("dataplane_in_sync")


def probe_status(envelope: pb.FromDataplane) -> bool:
    return (
        envelope.HasField("workload_endpoint_status_update")
        and envelope.workload_endpoint_status_update.id.workload_id == PROBE
    )


# ---------------------------------------------------------------------------
# The soak (live driver).
# ---------------------------------------------------------------------------


@dataclass(slots=True)
class Sample:
    messages: int
    elapsed: float
    rss_kb: int
    latencies: list[float] = field(default_factory=list)  # of the batches since the last sample


@dataclass(slots=True)
class SoakResult:
    load_s: float
    rss_loaded_kb: int
    samples: list[Sample]
    batch_latencies: list[tuple[int, float]]  # (messages sent before the batch, seconds)
    wall_s: float
    stderr: str
    soak_state: SoakState | None = None
    clean_state: SoakState | None = None
    clean_load_s: float = 0.0


def soak(topo: Topology, args: argparse.Namespace, workdir: Path, churn: Churn) -> SoakResult:
    with soak_node(topo, "sok", churn.sizes) as netns:
        driver = Driver(netns, workdir)
        start = driver.send(churn.snapshot())
        load_s = driver.wait(in_sync, args.timeout) - start
        driver.forget()
        rss_loaded = driver.rss_kb()
        print(f"loaded in {load_s:.2f} s, RSS {rss_loaded / 1024:.1f} MB", flush=True)
        began = time.monotonic()
        samples = [Sample(0, 0.0, rss_loaded)]
        latencies: list[tuple[int, float]] = []
        since_sample: list[float] = []
        sent = 0
        while sent < args.messages:
            batch = churn.batch(min(args.batch, args.messages - sent))
            written = driver.send(batch)
            latency = driver.wait(probe_status, args.timeout) - written
            driver.forget()
            latencies.append((sent, latency))
            since_sample.append(latency)
            sent += len(batch)
            if sent // args.sample_every != (sent - len(batch)) // args.sample_every:
                samples.append(
                    Sample(sent, time.monotonic() - began, driver.rss_kb(), since_sample)
                )
                since_sample = []
                _print_sample(samples[-2], samples[-1])
        if samples[-1].messages != sent:
            samples.append(Sample(sent, time.monotonic() - began, driver.rss_kb(), since_sample))
        wall = time.monotonic() - began
        stderr = driver.stop(args.timeout)
        ifaces = churn.live_interfaces()
        result = SoakResult(load_s, rss_loaded, samples, latencies, wall, stderr)
        result.soak_state = read_soak_state(netns, args.backend, ifaces)
    # The leak check: the final desired state alone, into a clean namespace.
    with soak_node(topo, "cln", churn.sizes) as netns:
        driver = Driver(netns, workdir)
        start = driver.send(churn.snapshot())
        result.clean_load_s = driver.wait(in_sync, args.timeout) - start
        driver.stop(args.timeout)
        result.clean_state = read_soak_state(netns, args.backend, ifaces)
    return result


def _print_sample(before: Sample, now: Sample) -> None:
    lat = [x * 1000 for x in now.latencies]
    rate = (now.messages - before.messages) / max(1e-9, now.elapsed - before.elapsed)
    print(
        f"  {now.messages:>9,} msgs {now.elapsed:7.0f} s  RSS {now.rss_kb / 1024:6.1f} MB"
        f"  latency p50 {percentile(lat, 50):6.1f} ms p95 {percentile(lat, 95):6.1f} ms"
        f"  {rate:6.0f} msg/s",
        flush=True,
    )


def _decile_median(latencies: list[tuple[int, float]], decile: int) -> float:
    n = len(latencies)
    chunk = [x for _, x in latencies[n * decile // 10 : max(n * (decile + 1) // 10, 1)]]
    return statistics.median(chunk) if chunk else float("nan")


def _verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def report_soak(args: argparse.Namespace, churn: Churn, result: SoakResult) -> None:
    samples = result.samples
    warm_at = args.messages * WARM_UP
    warm = next(s for s in samples if s.messages >= warm_at)
    end = samples[-1]
    growth = (end.rss_kb - warm.rss_kb) / warm.rss_kb
    early, late = (
        _decile_median(result.batch_latencies, 1),
        _decile_median(result.batch_latencies, 9),
    )
    drift = late / early
    assert result.soak_state is not None and result.clean_state is not None
    diff = result.soak_state.differences(result.clean_state)
    s = churn.sizes
    print(
        f"\n# soak, {args.backend}: {s.endpoints} endpoints (+{s.spare} spare interfaces and the"
        f" probe), {s.policies} policies, {s.sets} IP sets ({s.members} members),"
        f" {s.services} services, {s.remote_nodes} remote nodes"
    )
    print(f"# {machine()}")
    print(
        f"# {end.messages:,} messages in batches of {args.batch} in {result.wall_s:.0f} s"
        f" ({end.messages / result.wall_s:,.0f} msg/s); initial load {result.load_s:.2f} s\n"
    )
    print("| messages | elapsed | RSS | apply latency p50 / p95 (the batches since the last row) |")
    print("| ---: | ---: | ---: | --- |")
    for row in samples:
        lat = [x * 1000 for x in row.latencies]
        spread = f"{percentile(lat, 50):.1f} / {percentile(lat, 95):.1f} ms" if lat else "-"
        print(f"| {row.messages:,} | {row.elapsed:.0f} s | {row.rss_kb / 1024:.1f} MB | {spread} |")
    print()
    print(
        f"RSS: loaded {result.rss_loaded_kb / 1024:.1f} MB, after warm-up ({warm.messages:,}"
        f" messages) {warm.rss_kb / 1024:.1f} MB, end {end.rss_kb / 1024:.1f} MB: growth"
        f" {growth:+.1%} (goal <= {GOAL_RSS_GROWTH:.0%}): {_verdict(growth <= GOAL_RSS_GROWTH)}"
    )
    print(
        f"latency: p50 of the 2nd tenth of the batches {early * 1000:.1f} ms, of the last tenth"
        f" {late * 1000:.1f} ms: {drift:.2f}x (goal <= {GOAL_LATENCY_DRIFT:.2f}x):"
        f" {_verdict(drift <= GOAL_LATENCY_DRIFT)}"
    )
    print(f"kernel state at the end: {result.soak_state.counts()}")
    if diff:
        print(f"leaks: NOT met, {len(diff)} differences from a clean start on the final state:")
        for line in diff[:20]:
            print(f"  {line}")
    else:
        print(
            f"leaks: met, equal to a clean start on the final state (which took"
            f" {result.clean_load_s:.2f} s)"
        )
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    if errors:
        print(f"driver logged {len(errors)} errors, first: {errors[0]}")


# ---------------------------------------------------------------------------
# Finding what grows: the churn in-process, with tracemalloc.
# ---------------------------------------------------------------------------


def _platform(kind: str, workdir: Path) -> Platform:
    if kind == "sim":
        from dataplane.sim import SimPlatform  # noqa: PLC0415

        return SimPlatform()
    from dataplane.linux.platform import LinuxPlatform  # noqa: PLC0415

    return LinuxPlatform(sysctl_state=workdir / "sysctls.json")


async def _wait_for(dp: Dataplane, predicate: Callable[[pb.FromDataplane], bool]) -> None:
    while not predicate(await dp.recv_message()):
        pass


# Lookups and conversions per memo of ``convert`` (a wrapper around ``_Memo.get``
# counts them; the product code is unchanged).
MEMO_CALLS: dict[int, list[int]] = {}


def instrument_memos() -> None:
    original = convert._Memo.get

    def get(self: Any, msg: Message, make: Callable[[], Any]) -> Any:
        calls = MEMO_CALLS.setdefault(id(self), [0, 0])
        calls[0] += 1

        def counted() -> Any:
            calls[1] += 1
            return make()

        return original(self, msg, counted)

    setattr(convert._Memo, "get", get)  # noqa: B010 - a wrapper, as _runs.wrap_sync does


def _object_types() -> Counter[str]:
    return Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects())


def _memo_stats() -> str:
    out = []
    for name, memo in vars(convert).items():
        if isinstance(memo, convert._Memo):
            lookups, misses = MEMO_CALLS.get(id(memo), [0, 0])
            hits = 1 - misses / lookups if lookups else float("nan")
            out.append(f"{name}: {len(memo)} entries, {lookups:,} lookups, {hits:.1%} hits")
            MEMO_CALLS[id(memo)] = [0, 0]
    return "; ".join(out)


async def _trace(args: argparse.Namespace, workdir: Path) -> None:
    churn = Churn(_sizes(args), args.backend, args.seed)
    dp = Dataplane(_platform(args.trace, workdir))
    # One decoder for the whole stream, as the pipe has: it keeps the
    # stream's release and, up to v3.32, its host metadata.
    decoder = FrameDecoder()
    seq = 1

    def feed(msgs: list[Message]) -> None:
        nonlocal seq
        for envelope in decoder.feed(build_log(msgs, first_seq=seq)):
            dp.send_message(envelope)
        seq += len(msgs)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(dp.run)
        feed(churn.snapshot())
        await _wait_for(dp, in_sync)
        sent, warm = 0, None
        tracemalloc.start(args.trace_depth)
        began = time.perf_counter()
        while sent < args.messages:
            batch = churn.batch(min(args.batch, args.messages - sent))
            feed(batch)
            await _wait_for(dp, probe_status)
            sent += len(batch)
            if warm is None and sent >= args.messages * WARM_UP:
                gc.collect()
                warm = (tracemalloc.take_snapshot(), tracemalloc.get_traced_memory()[0], sent)
                warm_types = _object_types()
                print(f"warm-up done at {sent:,} messages: memos {_memo_stats()}", flush=True)
        gc.collect()
        end = tracemalloc.take_snapshot()
        traced = tracemalloc.get_traced_memory()[0]
        end_types = _object_types()
        dp.close_input()
    assert warm is not None
    print(
        f"\n# trace ({args.trace}): {sent:,} messages in {time.perf_counter() - began:.0f} s;"
        f" traced memory after warm-up ({warm[2]:,}) {warm[1] / 2**20:.1f} MB, end"
        f" {traced / 2**20:.1f} MB ({(traced - warm[1]) / warm[1]:+.1%})"
    )
    print(f"memos at the end (lookups since the warm-up): {_memo_stats()}")
    print(f"loop: {dp.stats}")
    grown = sorted(((end_types[k] - warm_types[k], k) for k in end_types), reverse=True)
    print("objects the collector tracks, most grown since the warm-up (type: count then, now):")
    for diff, name in grown[: args.top]:
        if diff > 0:
            print(f"  {name}: {warm_types[name]:,} -> {end_types[name]:,} ({diff:+,})")
    print(f"\ntop {args.top} growers since the warm-up (by allocation site):")
    key = "traceback" if args.trace_depth > 1 else "lineno"
    for stat in end.compare_to(warm[0], key)[: args.top]:
        print(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+8d} blocks")
        for line in stat.traceback.format()[-2 * args.trace_depth :]:
            print(f"      {line}")


def child_trace(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING, format="  [driver] %(levelname)s %(message)s")
    instrument_memos()
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        trio.run(_trace, args, Path(tmp))


# ---------------------------------------------------------------------------


def _sizes(args: argparse.Namespace) -> ChurnSizes:
    return ChurnSizes(
        endpoints=args.endpoints,
        spare=args.spare,
        policies=args.policies,
        sets=args.sets,
        members=args.members,
        services=args.services,
        remote_nodes=args.remote_nodes,
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000, help="messages per batch")
    parser.add_argument("--sample-every", type=int, default=0, help="default: messages / 20")
    parser.add_argument("--endpoints", type=int, default=100)
    parser.add_argument("--spare", type=int, default=40)
    parser.add_argument("--policies", type=int, default=20)
    parser.add_argument("--sets", type=int, default=50)
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--services", type=int, default=50)
    parser.add_argument("--remote-nodes", type=int, default=20)
    parser.add_argument("--backend", default="nft", choices=["legacy", "nft"])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=300, help="per step, seconds")
    parser.add_argument(
        "--trace",
        choices=["sim", "linux"],
        help="find what grows: the churn in-process with tracemalloc instead of the soak",
    )
    parser.add_argument("--trace-depth", type=int, default=1, help="frames per allocation site")
    parser.add_argument("--top", type=int, default=15, help="growers listed with --trace")
    parser.add_argument("--child", choices=["trace"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sample_every <= 0:
        args.sample_every = max(args.batch, args.messages // 20)
    return args


def _child_args(args: argparse.Namespace) -> list[str]:
    out = ["--child", "trace", "--trace", args.trace]
    for name in (
        "messages",
        "batch",
        "endpoints",
        "spare",
        "policies",
        "sets",
        "members",
        "services",
        "remote_nodes",
        "backend",
        "seed",
        "trace_depth",
        "top",
    ):
        out += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    return out


def main() -> None:
    args = parse_args()
    if args.child == "trace":
        child_trace(args)
        return
    if args.trace == "sim":
        child_trace(args)
        return
    require_root()
    churn = Churn(_sizes(args), args.backend, args.seed)
    with (
        sigterm_unwinds(),
        Topology() as topo,
        tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp,
    ):
        if args.trace == "linux":
            with soak_node(topo, "trc", churn.sizes) as netns:
                run_child(netns, SCRIPT, _child_args(args), timeout=args.timeout * 100)
            return
        result = soak(topo, args, Path(tmp), churn)
    report_soak(args, churn, result)


if __name__ == "__main__":
    main()
