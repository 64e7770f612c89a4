"""How the kernel benchmarks run: a parent that builds namespaces, children that measure.

Each benchmark script is both. The parent builds a node with
:mod:`testbed.topology`, writes the messages as framed logs, and starts the
same script again inside the node namespace (``ip netns exec NS python
SCRIPT --child ...``) so that the platform's command runner and netlink
handle program that namespace and the child's RSS is the driver's. The
floor, the same state loaded with the plain tools, runs as another child in
a fresh namespace. Children hand results back as JSON files in a work
directory.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import trio

from dataplane.core.loop import Dataplane
from dataplane.linux.ipsets.programmer import IPSetsProgrammer
from dataplane.linux.iptables.table import Table
from dataplane.linux.kernel.sysctls import SysctlWriter
from dataplane.linux.netlink.routes import RouteProgrammer
from dataplane.linux.netlink.vxlan import VxlanProgrammer
from dataplane.linux.nftables import together as nft_together
from dataplane.linux.nftables.elements import ElementWriter
from dataplane.linux.nftables.service_table import ServiceTable
from dataplane.linux.nftables.sets import NftSets
from dataplane.linux.platform import LinuxPlatform
from dataplane.wire.framing import FrameDecoder
from testbed.topology import Topology

T = TypeVar("T")


def require_root() -> None:
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces, iptables, ipset)")


def apply_quick(args: argparse.Namespace, smaller: Mapping[str, int]) -> None:
    """``--quick``: the smaller size for every option the command line did not give."""
    if not args.quick:
        return
    given = set(sys.argv)
    for option, value in smaller.items():
        if f"--{option}" not in given:
            setattr(args, option.replace("-", "_"), value)


def child_argv(netns: str, script: Path, args: list[str]) -> list[str]:
    """Run ``script`` with this interpreter inside ``netns``."""
    return ["ip", "netns", "exec", netns, sys.executable, str(script), *args]


def run_child(netns: str, script: Path, args: list[str], timeout: float) -> None:
    subprocess.run(child_argv(netns, script, args), check=True, timeout=timeout)


def run_floor(topo: Topology, script: Path, args: list[str], timeout: float) -> None:
    """The floor child, in a namespace of its own that holds nothing yet."""
    netns = topo.new_netns("flr")
    try:
        run_child(netns, script, args, timeout)
    finally:
        topo.delete_netns(netns)


def profile_text(title: str, profile: cProfile.Profile, top: int) -> str:
    """The ``top`` functions by cumulative time, then by own time."""
    out = io.StringIO()
    out.write(f"\n=== {title}: top {top} by cumulative time ===\n")
    pstats.Stats(profile, stream=out).strip_dirs().sort_stats("cumulative").print_stats(top)
    out.write(f"=== {title}: top {top // 2} by own time ===\n")
    pstats.Stats(profile, stream=out).strip_dirs().sort_stats("tottime").print_stats(top // 2)
    return out.getvalue()


class ThreadProfiles:
    """cProfile for work handed to ``trio.to_thread`` (routes, sysctls).

    cProfile only sees the thread that enabled it; the platform runs its
    blocking netlink and /proc/sys work in worker threads.
    """

    def __init__(self) -> None:
        self.profile = cProfile.Profile()
        self._original = trio.to_thread.run_sync
        self.active = False

    def install(self) -> None:
        original = self._original

        async def run_sync(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
            def profiled(*a: Any) -> T:
                if not self.active:
                    return fn(*a)
                self.profile.enable()
                try:
                    return fn(*a)
                finally:
                    self.profile.disable()

            return await original(profiled, *args, **kwargs)

        trio.to_thread.run_sync = run_sync  # type: ignore[assignment]


class GCTimes:
    """Time spent in the cyclic garbage collector, per generation (a gc callback)."""

    def __init__(self) -> None:
        self._start = 0.0
        self.total = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self.longest = 0.0

    def callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        elapsed = time.perf_counter() - self._start
        self.total[info["generation"]] += elapsed
        self.count[info["generation"]] += 1
        self.longest = max(self.longest, elapsed)

    def take(self) -> dict[str, Any]:
        """What was collected since the last take, and start again."""
        out = {"seconds": sum(self.total), "gen2": self.count[2], "gen2_s": self.total[2]}
        out["longest_s"] = self.longest
        self.total = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self.longest = 0.0
        return out


# Stage timings (child side): wrappers put around the programmers' entry
# points, so the product code stays unchanged. Label -> durations.
STAGES: dict[str, list[float]] = defaultdict(list)
# A part of the step before it in the table (not a step of its own).
ELEMENT_TRANSACTIONS = "apply: nft tables (ip, ip6) - of which element transactions"


def wrap_async(cls: type, attr: str, label: Callable[[Any], str]) -> None:
    original: Callable[..., Awaitable[Any]] = getattr(cls, attr)

    async def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await original(self, *args, **kwargs)
        finally:
            STAGES[label(self)].append(time.perf_counter() - start)

    setattr(cls, attr, timed)


def wrap_sync(cls: type, attr: str, label: str) -> None:
    original: Callable[..., Any] = getattr(cls, attr)

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            STAGES[label].append(time.perf_counter() - start)

    setattr(cls, attr, timed)


def wrap_function(module: Any, attr: str, label: str) -> None:
    """Time a module-level coroutine function where ``module`` calls it."""
    original: Callable[..., Awaitable[Any]] = getattr(module, attr)

    async def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await original(*args, **kwargs)
        finally:
            STAGES[label].append(time.perf_counter() - start)

    setattr(module, attr, timed)


def instrument_linux() -> None:
    """Time the loop's phases and each Linux programmer (labels land in :data:`STAGES`)."""
    wrap_sync(Dataplane, "_phase1", "phase 1 (managers)")
    wrap_async(Dataplane, "_apply", lambda _s: "apply: total")
    wrap_async(LinuxPlatform, "_start", lambda _s: "apply: platform start")
    wrap_sync(LinuxPlatform, "_write", "apply: render")
    wrap_async(IPSetsProgrammer, "apply_updates", lambda _s: "apply: ipsets update")
    wrap_async(Table, "apply", lambda s: f"apply: iptables {s.name} v{s.version}")
    wrap_async(NftSets, "apply_updates", lambda _s: "apply: nft sets update")
    # Both families' tables in one nft -f (programmers.apply_rules, which
    # takes it from its module at each call); the IP sets' update runs
    # inside it, while nft parses the script.
    wrap_function(nft_together, "apply_together", "apply: nft tables (ip, ip6)")
    # ... of which the element transactions (the kernel's commit of each).
    wrap_sync(ElementWriter, "_transact", ELEMENT_TRANSACTIONS)
    wrap_async(ServiceTable, "apply", lambda s: f"apply: nft services {s.layout.family}")
    wrap_async(NftSets, "apply_deletions", lambda _s: "apply: nft sets delete")
    wrap_async(VxlanProgrammer, "apply", lambda _s: "apply: vxlan (device, neigh, fdb)")
    wrap_async(RouteProgrammer, "apply", lambda _s: "apply: routes")
    wrap_async(SysctlWriter, "apply", lambda _s: "apply: sysctls")
    wrap_async(IPSetsProgrammer, "apply_deletions", lambda _s: "apply: ipsets delete")


# The initial load (child side) and its stage table (parent side), the same
# for every benchmark that loads a whole node.


def feed(dp: Dataplane, data: bytes) -> tuple[float, float]:
    """Decode a framed log as the pipe would and hand every envelope to the loop.

    Returns (start, decoded): when decoding began and when it ended.
    """
    start = time.perf_counter()
    envelopes = FrameDecoder().feed(data)
    decoded = time.perf_counter()
    for envelope in envelopes:
        dp.send_message(envelope)
    return start, decoded


def load_figures(dp: Dataplane, start: float, decoded: float, done: float) -> dict[str, Any]:
    """What a child reports of the initial load, ``done`` being DataplaneInSync."""
    return {
        "programmed_s": done - start,
        "decode_s": decoded - start,
        "first_stages": {k: sum(v) for k, v in STAGES.items()},
        "applies_to_in_sync": dp.stats.applies + dp.stats.apply_failures,
        "apply_failures": dp.stats.apply_failures,
        "rejected": dp.stats.rejected,
    }


def stage_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    """Per stage, one column per result: decode, every stage seen in any, programmed."""
    labels: list[str] = []
    for r in results:
        labels += [k for k in r["first_stages"] if k not in labels]
    rows = [["decode (FrameDecoder)", *(f"{r['decode_s']:.3f}" for r in results)]]
    rows += [
        [label, *(f"{r['first_stages'].get(label, 0.0):.3f}" for r in results)]
        for label in sorted(labels)
    ]
    rows.append(["**programmed**", *(f"{r['programmed_s']:.3f}" for r in results)])
    return rows
