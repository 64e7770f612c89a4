"""Service load balancing at scale on the Linux platform, real kernel.

A fresh node (network namespace, built with ``testbed/topology.py``)
with three pods -- one client and two backend servers -- is given
``--services`` ClusterIP services (default 5,000; one TCP port "http",
80 -> 8080; cluster IPs a seeded random sample of 10.96.0.0/16, and of
fd00:96::/112 with ``--ipv6``) with ``--backends`` backends each (default
10, addresses in 10.65.0.0/16 on other nodes; they need not exist). The
first service (lowest cluster IP) and the last (highest) point at the two
real backend pods instead. Measured:

1. **programmed**: from feeding all messages (decoding the framed stream
   as the pipe would, then ``send_message`` of config, pool, profile, the
   three endpoints, every ``ServiceUpdate`` + ``ServiceBackendsUpdate``,
   InSync) until ``DataplaneInSync`` comes out of ``recv_message`` (the
   first apply is done).
2. **floor**: the tables programmed in 1 (``iptables-save``, all tables,
   plus ``ipset save`` for the pool set the rules reference; on
   ``--backend nftables`` our tables as ``nft list table`` shows them)
   loaded with plain ``iptables-restore`` (or one ``nft -f``) into a second
   fresh (empty) namespace; the ratio programmed / floor.
3. **one backend change**: ``--changes`` times (default 50), a
   ``ServiceBackendsUpdate`` replacing one backend address of one random
   service (never the first or last), timed from ``send_message`` until the
   platform's ``apply`` that consumed it returns (``LinuxPlatform.apply`` is
   wrapped in a subclass; no status message exists for services), with
   the ``iptables-restore`` input each change wrote (the command runner is
   wrapped) to show that only that service's chains are rewritten; and,
   on the nf_tables backends (nft, nftables), until the change is **in
   force**: the first nf_tables notification holding its new backend
   address (``benchmarks/_monitor.py``). On nftables the apply itself
   returns only after the kernel's grace period for the slots it freed.
4. **connection set-up**: from the client pod, ``--connects`` rounds
   (default 300) of TCP ``connect()`` to the first service's VIP, the last
   service's VIP and, as a baseline, straight to a backend pod's IP, in a
   shuffled order each round, timed with ``perf_counter_ns`` around
   ``connect()`` by a small stdlib script running inside the client pod
   (the topology agents' request round trip would swamp the microseconds).
   The driver keeps running meanwhile, as on a real node.
5. **peak RSS** of the driver process (``ru_maxrss``).

The driver (``Dataplane`` + ``LinuxPlatform``, in-process) runs in a child
process started with ``ip netns exec NODE`` so that its default command
runner and netlink handle program the node namespace and its RSS is the
driver's, not the message generator's. Every namespace is created by a
``Topology`` and deleted at the end, also on error, Ctrl-C or SIGTERM.

Needs root, ``ip``, ``ipset``, ``iptables-{legacy,nft}*``, ``nft``.

Usage: python benchmarks/bench_services.py [--quick] [--services N] [--backends N]
       [--backend nft|legacy|nftables] [--ipv6] [--changes N] [--connects N] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import ipaddress
import json
import logging
import os
import random
import resource
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from google.protobuf.message import Message

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _floor
from benchmarks._common import machine, markdown_table, percentile, timed_tool
from benchmarks._monitor import Monitor
from benchmarks._runs import apply_quick, child_argv, profile_text, require_root, run_floor
from dataplane.core.loop import Dataplane
from dataplane.linux.kernel.cmd import CommandResult, ProcessRunner
from dataplane.linux.netlink.overlay_plan import OverlayPlan
from dataplane.linux.platform import LinuxPlatform
from dataplane.linux.programmers import Programmers
from dataplane.model.services import Service
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import FrameDecoder
from dataplane.wire.msglog import build_log
from testbed.node import allow_all_profile, workload_update
from testbed.topology import Pod, Topology, sigterm_unwinds

SCRIPT = Path(__file__).resolve()
NAMESPACE_COUNT = 100  # Kubernetes namespaces the services are spread over
SYNTHETIC_SPAN = 61439  # backend addresses 10.65.0.1 - 10.65.239.255
SPARE_BASE = 61440  # replacement addresses for the changes: 10.65.240.0 +
SPARE_SPAN = 2560  # ... up to 10.65.249.255
PODS = {  # name -> (IPv4, IPv6); outside every synthetic address
    "client": ("10.65.250.1", "fd00:10:65:1::1"),
    "backend-1": ("10.65.250.2", "fd00:10:65:1::2"),
    "backend-2": ("10.65.250.3", "fd00:10:65:1::3"),
}
BACKEND_PODS = ("backend-1", "backend-2")
BACKEND_PORT = 8080


# ---------------------------------------------------------------------------
# The generated services (parent side).
# ---------------------------------------------------------------------------


def _v4(n: int) -> str:
    return f"10.65.{(n >> 8) & 255}.{n & 255}"


def _v6(n: int) -> str:
    return f"fd00:10:65::{n:x}"


class Scenario:
    """Deterministic (seeded) services, backends and backend changes."""

    def __init__(self, args: argparse.Namespace, seed: int = 11) -> None:
        self.count: int = args.services
        self.per_service: int = args.backends
        self.ipv6: bool = args.ipv6
        self.backend: str = args.backend
        self.rng = random.Random(seed)
        offsets = sorted(self.rng.sample(range(1, 65535), self.count))
        base4 = ipaddress.IPv4Address("10.96.0.0")
        base6 = ipaddress.IPv6Address("fd00:96::")
        self.vips4 = [str(base4 + o) for o in offsets]
        self.vips6 = [str(base6 + o) for o in offsets]
        # Backend address numbers per service (index into 10.65.0.0/16).
        b = self.per_service
        self.addresses = [
            [(s * b + j) % SYNTHETIC_SPAN + 1 for j in range(b)] for s in range(self.count)
        ]
        self.change_log: list[dict[str, Any]] = []

    @staticmethod
    def name(index: int) -> tuple[str, str]:
        return f"ns-{index % NAMESPACE_COUNT:02d}", f"svc-{index:05d}"

    def real(self, index: int) -> bool:
        """The first and the last service point at the real backend pods."""
        return index in (0, self.count - 1)

    def service_update(self, index: int) -> pb.ServiceUpdate:
        namespace, name = self.name(index)
        vips = [self.vips4[index], self.vips6[index]] if self.ipv6 else [self.vips4[index]]
        return pb.ServiceUpdate(
            name=name,
            namespace=namespace,
            type="ClusterIP",
            cluster_ips=vips,
            ports=[pb.ServicePort(Protocol="TCP", Port=80, name="http")],
        )

    def _backend(self, v4: str, v6: str, local: bool) -> pb.ServiceBackend:
        return pb.ServiceBackend(
            addresses=[v4, v6] if self.ipv6 else [v4],
            ports=[pb.ServiceBackendPort(name="http", protocol="TCP", port=BACKEND_PORT)],
            local=local,
            node_name="bench-node" if local else "other-node",
        )

    def backends_update(self, index: int) -> pb.ServiceBackendsUpdate:
        namespace, name = self.name(index)
        if self.real(index):
            backends = [self._backend(*PODS[p], local=True) for p in BACKEND_PODS]
        else:
            backends = [self._backend(_v4(n), _v6(n), local=False) for n in self.addresses[index]]
        return pb.ServiceBackendsUpdate(name=name, namespace=namespace, backends=backends)

    def snapshot(self, ifaces: dict[str, str]) -> list[Message]:
        """Everything Felix (plus our service extension) sends a starting node."""
        msgs: list[Message] = [
            pb.ConfigUpdate(
                config={
                    # "nftables": native nftables (NFTablesMode), else an iptables backend.
                    "IptablesBackend": "nft" if self.backend == "nftables" else self.backend,
                    "NFTablesMode": "Enabled" if self.backend == "nftables" else "Disabled",
                    "Ipv6Support": "true" if self.ipv6 else "false",
                    "InterfacePrefix": "cali",
                    "ChainInsertMode": "insert",
                    "DefaultEndpointToHostAction": "ACCEPT",
                    "FelixHostname": "bench-node",
                    "ReportingIntervalSecs": "0",
                    "LogSeverityScreen": "Warning",
                }
            ),
            pb.HostMetadataUpdate(hostname="bench-node", ipv4_addr="192.168.200.1"),
            pb.IPAMPoolUpdate(id="pool-v4", pool=pb.IPAMPool(cidr="10.65.0.0/16", masquerade=True)),
            allow_all_profile("kns.bench"),
        ]
        if self.ipv6:
            msgs.append(pb.IPAMPoolUpdate(id="pool-v6", pool=pb.IPAMPool(cidr="fd00:10:65::/48")))
        for pod, iface in ifaces.items():
            v4, v6 = PODS[pod]
            msgs.append(
                workload_update(
                    f"bench/{pod}",
                    iface,
                    ipv4=[v4],
                    ipv6=[v6] if self.ipv6 else [],
                    profiles=["kns.bench"],
                )
            )
        for index in range(self.count):
            msgs += [self.service_update(index), self.backends_update(index)]
        msgs.append(pb.InSync())
        return msgs

    def changes(self, count: int) -> list[Message]:
        """``count`` updates, each replacing one backend address of one service."""
        if count > SPARE_SPAN:
            raise SystemExit(f"at most {SPARE_SPAN} changes")
        out: list[Message] = []
        for k in range(count):
            index = self.rng.randrange(1, self.count - 1)
            slot = self.rng.randrange(self.per_service)
            old = self.addresses[index][slot]
            self.addresses[index][slot] = SPARE_BASE + k
            self.change_log.append(
                {"service": "/".join(self.name(index)), "old": _v4(old), "new": _v4(SPARE_BASE + k)}
            )
            out.append(self.backends_update(index))
        return out


# ---------------------------------------------------------------------------
# The driver, instrumented (child side, inside the node namespace).
# ---------------------------------------------------------------------------


@dataclass(slots=True)
class Call:
    """One command the platform ran."""

    label: str  # e.g. "restore v4 nat", "save v4 nat", "ipset save"
    start: float
    seconds: float
    lines: int  # of stdin (restore input)
    nbytes: int
    text: str = ""  # restore input, kept when small (for the report)


def _label(argv: Sequence[str], stdin: bytes | None) -> str:
    tool = os.path.basename(argv[0])
    family = "v6" if tool.startswith("ip6") else "v4"
    if "restore" in tool and tool.startswith(("iptables", "ip6tables")):
        head = (stdin or b"").split(b"\n", 1)[0].decode(errors="replace").lstrip("*")
        return f"restore {family} {head}"
    if "save" in tool and tool.startswith(("iptables", "ip6tables")):
        table = argv[argv.index("-t") + 1] if "-t" in argv else "all"
        return f"save {family} {table}"
    if tool == "ipset":
        return f"ipset {argv[1] if len(argv) > 1 else ''}".strip()
    return tool


class RecordingRunner(ProcessRunner):
    """The platform's default runner, recording what it runs and how long it takes."""

    KEEP_TEXT = 20_000  # bytes of restore input kept per call

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        start = time.perf_counter()
        try:
            return await super().run(argv, stdin=stdin, check=check)
        finally:
            data = stdin or b""
            label = _label(argv, stdin)
            keep = label.startswith("restore") and len(data) <= self.KEEP_TEXT
            self.calls.append(
                Call(
                    label,
                    start,
                    time.perf_counter() - start,
                    data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0),
                    len(data),
                    data.decode(errors="replace") if keep else "",
                )
            )


@dataclass(slots=True)
class ApplyRecord:
    generation: int  # services handed to the platform before this apply started
    start: float
    end: float
    render_s: float


class TimedPlatform(LinuxPlatform):
    """LinuxPlatform whose applies are timed and can be awaited.

    An apply is matched to a change by the services manager's hand-over:
    ``set_service`` is called in the same phase 2, just before ``apply``.
    (Matching by "the first apply that started after the send" is wrong: a
    timer that is already due makes the loop apply once *before* it reads
    the waiting input.)
    """

    def __init__(self, runner: RecordingRunner) -> None:
        super().__init__(runner=runner)
        self.services_set = 0
        self.applies: list[ApplyRecord] = []
        self._render_s = 0.0
        self._applied = trio.Event()

    def set_service(self, service: Service) -> None:
        self.services_set += 1
        super().set_service(service)

    def _write(self, kernel: Programmers) -> OverlayPlan:
        start = time.perf_counter()
        try:
            return super()._write(kernel)
        finally:
            self._render_s += time.perf_counter() - start

    async def apply(self) -> None:
        generation, start = self.services_set, time.perf_counter()
        self._render_s = 0.0
        await super().apply()  # a failure is retried by the loop; only successes count
        self.applies.append(ApplyRecord(generation, start, time.perf_counter(), self._render_s))
        self._applied.set()
        self._applied = trio.Event()

    async def applied(self, generation: int) -> ApplyRecord:
        """The first successful apply after the ``generation``-th service hand-over."""
        while not self.applies or self.applies[-1].generation < generation:
            await self._applied.wait()
        return next(a for a in self.applies if a.generation >= generation)


class TimedDataplane(Dataplane):
    """Dataplane timing phase 1 and whole applies (managers' deferred work included)."""

    phase1_s: float = 0.0
    apply_s: float = 0.0

    def _phase1(self, batch: list[pb.ToDataplane]) -> None:
        start = time.perf_counter()
        super()._phase1(batch)
        self.phase1_s += time.perf_counter() - start

    async def _apply(self) -> None:
        start = time.perf_counter()
        await super()._apply()
        self.apply_s += time.perf_counter() - start


def _calls_in(runner: RecordingRunner, start: float, end: float) -> list[Call]:
    return [c for c in runner.calls if start <= c.start <= end]


def _calls_overlapping(runner: RecordingRunner, start: float, end: float) -> list[Call]:
    return [c for c in runner.calls if c.start <= end and c.start + c.seconds >= start]


def _by_label(calls: Sequence[Call]) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in calls:
        out[c.label] = out.get(c.label, 0.0) + c.seconds
    return out


async def _sh(argv: list[str]) -> str:
    proc = await trio.run_process(argv, capture_stdout=True, capture_stderr=True)
    return bytes(proc.stdout).decode()


async def _dump(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Save what is programmed, in the plain tools' formats, for the floor."""
    if args.backend == "nftables":
        counts = await trio.to_thread.run_sync(_floor.nft_save, workdir)
        text = (workdir / "nft.save").read_text()
        # One line per element in nft's listing of a big map or set: enough to count.
        counts["elements"] = sum(1 for x in text.splitlines() if x.startswith("\t\t\t     "))
        return {"nftables": counts}
    out: dict[str, Any] = {}
    for family in ("4", "6") if args.ipv6 else ("4",):
        tool = "iptables" if family == "4" else "ip6tables"
        text = await _sh([f"{tool}-{args.backend}-save"])
        (workdir / f"{tool}.save").write_text(text)
        table = ""
        rules: Counter[str] = Counter()
        chains: Counter[str] = Counter()
        for line in text.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":"):
                chains[table] += 1
            elif line.startswith("-A "):
                rules[table] += 1
        out[f"v{family}"] = {"rules": dict(rules), "chains": dict(chains), "bytes": len(text)}
        nat = text.split("*nat", 1)[-1].split("COMMIT", 1)[0].splitlines()
        out[f"v{family}"]["dispatch_chains"] = sum(
            1 for x in nat if x.startswith((":cali-svd-", ":cali-svc-dispatch"))
        )
    (workdir / "ipset.save").write_text(await _sh(["ipset", "save"]))
    return out


async def _measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    snapshot = (workdir / "snapshot.log").read_bytes()
    changes = FrameDecoder().feed((workdir / "changes.log").read_bytes())
    runner = RecordingRunner()
    plat = TimedPlatform(runner)
    dp = TimedDataplane(plat)
    result: dict[str, Any] = {"log_bytes": len(snapshot)}
    statuses: dict[str, str] = {}

    def note(msg: pb.FromDataplane) -> str:
        kind = str(msg.WhichOneof("payload"))
        if kind == "workload_endpoint_status_update":
            update = msg.workload_endpoint_status_update
            statuses[update.id.workload_id] = update.status.status
        return kind

    async with trio.open_nursery() as nursery:
        nursery.start_soon(dp.run)
        await trio.sleep(0.05)  # let the loop start and wait for input
        profile = cProfile.Profile()
        if args.profile:
            profile.enable()
        start = time.perf_counter()
        envelopes = FrameDecoder().feed(snapshot)
        decoded = time.perf_counter()
        for envelope in envelopes:
            dp.send_message(envelope)
        del envelopes
        with trio.fail_after(args.timeout):
            while note(await dp.recv_message()) != "dataplane_in_sync":
                pass
        done = time.perf_counter()
        if args.profile:
            profile.disable()
            sys.stderr.write(
                profile_text("first apply (all messages -> DataplaneInSync)", profile, 35)
            )
        first = plat.applies[-1]
        result["programmed_s"] = done - start
        result["stages"] = {
            "decode (FrameDecoder)": decoded - start,
            "phase 1 (managers)": dp.phase1_s,
            "deferred work (managers -> platform)": dp.apply_s - (first.end - first.start),
            "render (all chains)": first.render_s,
            **{
                label: seconds
                for label, seconds in _by_label(_calls_in(runner, first.start, first.end)).items()
            },
        }
        result["applies_to_in_sync"] = dp.stats.applies + dp.stats.apply_failures
        result["apply_failures"] = dp.stats.apply_failures
        result["rejected"] = dp.stats.rejected
        result["rss_kb_after_load"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result["restores_first_apply"] = [
            {"label": c.label, "lines": c.lines, "bytes": c.nbytes, "seconds": c.seconds}
            for c in _calls_in(runner, first.start, first.end)
            if c.label.startswith("restore")
        ]
        with trio.fail_after(10):  # the pods' links are up: statuses come with in-sync
            while sum(1 for s in statuses.values() if s == "up") < len(PODS):
                note(await dp.recv_message())
        dump_start = time.perf_counter()
        result["dump"] = await _dump(args, workdir)
        result["dump_s"] = time.perf_counter() - dump_start

        # 3. One backend change at a time on the loaded node.
        rng = random.Random(5)
        profile = cProfile.Profile()
        writes_before = plat.table_writes()
        applies_before = dp.stats.applies
        records: list[dict[str, Any]] = []
        for envelope in changes:
            await trio.sleep(rng.uniform(0.0, 0.05))  # not in step with the 1 s link poll
            if args.profile:
                profile.enable()
            target = plat.services_set + 1
            sent, sent_mono = time.perf_counter(), time.monotonic()
            dp.send_message(envelope)
            with trio.fail_after(args.timeout):
                record = await plat.applied(target)
            if args.profile:
                profile.disable()
            restores = [
                c
                for c in _calls_in(runner, record.start, record.end)
                if c.label.startswith("restore")
            ]
            waited = _calls_overlapping(runner, sent, record.start)
            records.append(
                {
                    "sent_monotonic": sent_mono,  # the in-force time is the parent's to find
                    "latency_s": record.end - sent,
                    # Phase 1 and deferred work, plus any apply already running
                    # (or already due) when the change arrived.
                    "queued_s": record.start - sent,
                    "apply_s": record.end - record.start,
                    "render_s": record.render_s,
                    "restore_s": sum(c.seconds for c in restores),
                    "saves_waited": sum(1 for c in waited if c.label.startswith("save")),
                    "saves": sum(
                        1
                        for c in _calls_in(runner, record.start, record.end)
                        if c.label.startswith("save")
                    ),
                    "restores": [
                        {"label": c.label, "lines": c.lines, "bytes": c.nbytes, "text": c.text}
                        for c in restores
                    ],
                }
            )
            for msg in dp.drain_output():  # the output channel is unbounded; keep it empty
                note(msg)
        if args.profile:
            sys.stderr.write(profile_text(f"{len(changes)} backend changes", profile, 35))
        result["changes"] = records
        result["saves_after_load"] = [
            {"label": c.label, "seconds": c.seconds}
            for c in runner.calls
            if c.start > first.end and c.label.startswith("save")
        ]
        result["change_table_writes"] = plat.table_writes() - writes_before
        result["change_applies"] = dp.stats.applies - applies_before
        result["apply_failures_total"] = dp.stats.apply_failures

        # 4. The parent probes connections now; the driver keeps running.
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await trio.to_thread.run_sync(sys.stdin.readline)
        result["rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result["rss_kb_children"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        result["applies_total"] = dp.stats.applies
        dp.close_input()
    return result


def child_driver(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING, format="  [driver] %(levelname)s %(message)s")
    workdir = Path(args.workdir)
    result = trio.run(_measure, args, workdir)
    (workdir / "result.json").write_text(json.dumps(result))


def child_floor(args: argparse.Namespace) -> None:
    """Load the saved tables with the plain tools (inside a fresh namespace)."""
    workdir, b = Path(args.workdir), args.backend
    if b == "nftables":
        if subprocess.run(["nft", "list", "tables"], capture_output=True, check=True).stdout:
            raise RuntimeError("floor namespace is not empty")
        floor = {"nft -f": timed_tool(["nft", "-f", "-"], workdir / "nft.save")}
        listed = subprocess.run(["nft", "list", "ruleset"], capture_output=True, check=True)
        check = {"bytes listed": len(listed.stdout)}
        (workdir / "floor.json").write_text(json.dumps({"floor": floor, "check": check}))
        return
    tools = ["iptables", "ip6tables"] if args.ipv6 else ["iptables"]

    def rules(tool: str) -> int:
        out = subprocess.run([f"{tool}-{b}-save"], capture_output=True, check=True).stdout
        return out.count(b"\n-A ")

    sets = subprocess.run(["ipset", "list", "-name"], capture_output=True, check=True).stdout
    if sets.split() or any(rules(t) for t in tools):
        raise RuntimeError("floor namespace is not empty")
    floor = {"ipset restore": timed_tool(["ipset", "restore"], workdir / "ipset.save")}
    for tool in tools:
        floor[f"{tool}-restore"] = timed_tool([f"{tool}-{b}-restore"], workdir / f"{tool}.save")
    check = {tool: rules(tool) for tool in tools}
    (workdir / "floor.json").write_text(json.dumps({"floor": floor, "check": check}))


# ---------------------------------------------------------------------------
# Connection set-up probes (run inside the client pod).
# ---------------------------------------------------------------------------

_CONNECT_PROBE = r"""
import json, random, socket, sys, time
targets, rounds, warmup = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
times = {t[0]: [] for t in targets}
failures = {t[0]: 0 for t in targets}
rng = random.Random(1)
for r in range(warmup + rounds):
    order = list(targets)
    rng.shuffle(order)
    for label, addr, port in order:
        s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
        s.settimeout(3.0)
        t0 = time.perf_counter_ns()
        try:
            s.connect((addr, port))
        except OSError:
            failures[label] += r >= warmup
            s.close()
            continue
        t1 = time.perf_counter_ns()
        s.close()
        if r >= warmup:
            times[label].append((t1 - t0) / 1000.0)
print(json.dumps({"us": times, "failures": failures}))
"""


def connect_probes(
    client: Pod, targets: list[tuple[str, str, int]], rounds: int, warmup: int = 20
) -> dict[str, Any]:
    argv = ["ip", "netns", "exec", client.netns, sys.executable, "-c", _CONNECT_PROBE]
    argv += [json.dumps(targets), str(rounds), str(warmup)]
    proc = subprocess.run(argv, capture_output=True, check=False, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"connect probes failed: {proc.stderr.decode()[-1000:]}")
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


# ---------------------------------------------------------------------------
# Orchestration (parent side).
# ---------------------------------------------------------------------------


def _readline(proc: subprocess.Popen[bytes], timeout: float) -> str:
    """One line from the child's stdout, or an error if it dies or stalls."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    buf = b""
    while b"\n" not in buf:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the driver process did not report in time")
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the driver process exited ({proc.wait()})")
            buf += chunk
    return buf.decode().strip()


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    scenario = Scenario(args)
    with tempfile.TemporaryDirectory(prefix="bench-services-") as tmp, Topology() as topo:
        workdir = Path(tmp)
        node = topo.add_node("node")
        pods = {
            name: node.add_pod(name, v4, v6 if args.ipv6 else None)
            for name, (v4, v6) in PODS.items()
        }
        for name in BACKEND_PODS:
            pods[name].listen("tcp", BACKEND_PORT, None if args.ipv6 else 4)
        built = time.perf_counter()
        snapshot = scenario.snapshot({name: pod.iface for name, pod in pods.items()})
        (workdir / "snapshot.log").write_bytes(build_log(snapshot))
        changes = scenario.changes(args.changes)
        (workdir / "changes.log").write_bytes(build_log(changes, first_seq=10**7))
        del snapshot
        print(
            f"[bench] {args.services:,} services x {args.backends} backends: messages built in"
            f" {time.perf_counter() - built:.2f} s; node {node.netns}",
            file=sys.stderr,
            flush=True,
        )
        child = ["--child", "driver", "--workdir", tmp, "--backend", args.backend]
        child += ["--timeout", str(args.timeout)]
        child += ["--ipv6"] * args.ipv6 + ["--profile"] * args.profile
        # When each change is in the kernel: its new address in an nf_tables
        # commit (iptables-legacy sends none).
        monitor = Monitor(node) if args.backend != "legacy" else None
        for change in scenario.change_log:
            if monitor is not None:
                monitor.expect(change["new"])
        driver = subprocess.Popen(
            child_argv(node.netns, SCRIPT, child),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        try:
            if _readline(driver, args.timeout * 3) != "ready":
                raise RuntimeError("unexpected output from the driver process")
            print("[bench] loaded and changes done; probing connections", file=sys.stderr)
            client = pods["client"]
            first, last = scenario.vips4[0], scenario.vips4[-1]
            for vip in (first, last):  # sanity: the VIP really reaches a backend pod
                probe = client.connect("tcp", vip, 80, timeout=3)
                if not (probe.ok and probe.reply in BACKEND_PODS):
                    raise RuntimeError(f"{vip}:80 does not reach a backend pod: {probe}")
            targets = [
                ("first service VIP", first, 80),
                ("last service VIP", last, 80),
                ("backend pod IP (no service)", PODS[BACKEND_PODS[0]][0], BACKEND_PORT),
            ]
            probes = connect_probes(client, targets, args.connects)
            assert driver.stdin is not None
            driver.stdin.write(b"done\n")
            driver.stdin.close()
            if driver.wait(timeout=args.timeout) != 0:
                raise RuntimeError(f"driver process exited {driver.returncode}")
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
            if monitor is not None:
                monitor.stop()
        result: dict[str, Any] = json.loads((workdir / "result.json").read_text())
        if monitor is not None:
            for record, change in zip(result["changes"], scenario.change_log, strict=True):
                seen = monitor.seen.get(change["new"])
                record["in_force_s"] = None if seen is None else seen - record["sent_monotonic"]
        result["probes"] = probes
        result["vips"] = {"first": first, "last": last}
        floor = ["--child", "floor", "--workdir", tmp, "--backend", args.backend]
        floor += ["--ipv6"] * args.ipv6
        run_floor(topo, SCRIPT, floor, timeout=args.timeout)
        result.update(json.loads((workdir / "floor.json").read_text()))
        result["change_log"] = scenario.change_log
    result["elapsed_s"] = time.perf_counter() - started
    result["loadavg"] = [load_before, os.getloadavg()[0]]
    return result


# ---------------------------------------------------------------------------
# Report.
# ---------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"


def _secs(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds < 100 else f"{seconds:.0f} s"


@dataclass(slots=True)
class ChangeSummary:
    latencies: list[float] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    chains: list[int] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    tables: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, changes: list[dict[str, Any]]) -> ChangeSummary:
        out = cls()
        for change in changes:
            out.latencies.append(change["latency_s"])
            restores = change["restores"]
            out.lines.append(sum(r["lines"] for r in restores))
            texts = "\n".join(r["text"] for r in restores).splitlines()
            out.chains.append(sum(1 for x in texts if x.startswith(":")))
            out.deleted.append(sum(1 for x in texts if x.startswith("-X ")))
            out.tables.update(r["label"] for r in restores)
        return out


def _in_force_row(changes: list[dict[str, Any]]) -> list[list[str]]:
    """The change in the kernel: its new address in an nf_tables commit."""
    seen = [c["in_force_s"] for c in changes if c.get("in_force_s") is not None]
    if not seen:
        return []
    missed = len(changes) - len(seen)
    return [
        [
            "… in force (its new address in the kernel), p50 / p99",
            f"{_ms(percentile(seen, 50))} / {_ms(percentile(seen, 99))}",
            "from the send until the first nf_tables notification holding the new backend"
            " address (`benchmarks/_nft_events.py`)" + (f"; {missed} not seen" if missed else ""),
        ]
    ]


def _held(r: dict[str, Any], args: argparse.Namespace) -> str:
    """What the node holds after the load, in its backend's terms."""
    if args.backend == "nftables":
        held = r["dump"]["nftables"]
        return (
            f"native nftables: our tables {held['bytes_nft'] / 1e6:.1f} MB listed, about"
            f" {held['elements']:,} map and set elements, {held['chains_v4']:,} chains in the"
            " filter table v4."
        )
    v4 = r["dump"]["v4"]
    return (
        f"iptables backend {args.backend}; nat table v4: {v4['rules'].get('nat', 0):,} rules in"
        f" {v4['chains'].get('nat', 0):,} chains ({v4['dispatch_chains']} dispatch-tree"
        f" chains); filter v4: {v4['rules'].get('filter', 0):,} rules"
        + (f"; nat v6: {r['dump']['v6']['rules'].get('nat', 0):,} rules" if args.ipv6 else "")
        + "."
    )


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    floor = r["floor"]
    floor_s = sum(floor.values())
    changes = ChangeSummary.of(r["changes"])
    lat = changes.latencies
    applies = [c["apply_s"] for c in r["changes"]]
    blocked = [c["queued_s"] for c in r["changes"] if c["saves_waited"]]
    probes = r["probes"]["us"]
    failures = r["probes"]["failures"]
    family = "IPv4 + IPv6 (dual-stack services)" if args.ipv6 else "IPv4"
    n = len(lat)
    nftables = args.backend == "nftables"
    print()
    print(
        f"Node: {args.services:,} ClusterIP services x {args.backends} backends ({family}), "
        + _held(r, args)
    )
    print(f"Machine: {machine()}")
    print()
    rows = [
        [
            "time until programmed (all messages → DataplaneInSync)",
            _secs(r["programmed_s"]),
            "decode + send_message of the whole stream until DataplaneInSync from recv_message",
        ],
        [
            "floor: "
            + (
                "one `nft -f` of the same tables"
                if nftables
                else "plain iptables-restore of the same tables"
            ),
            _secs(floor_s),
            (
                "`nft list table` of ours"
                if nftables
                else "`iptables-save` (all tables) + `ipset save`"
            )
            + " after 1, loaded into a fresh namespace: "
            + ", ".join(f"{k} {_secs(v)}" for k, v in floor.items()),
        ],
        ["programmed / floor", f"{r['programmed_s'] / floor_s:.1f}x", ""],
        [
            f"one backend change, p50 / p99 ({n} changes)",
            f"{_ms(percentile(lat, 50))} / {_ms(percentile(lat, 99))}",
            "send_message of a ServiceBackendsUpdate (one address replaced) until the"
            " platform's apply that consumed it returns"
            + (
                f"; {len(blocked)} of {n} waited behind a periodic full re-read of the tables"
                f" (IptablesRefreshInterval) already running, up to {_secs(max(blocked))}"
                if blocked
                else ""
            ),
        ],
        *_in_force_row(r["changes"]),
        [
            "… of which the apply that consumed it, p50 / p99",
            f"{_ms(percentile(applies, 50))} / {_ms(percentile(applies, 99))}",
            f"render median {_ms(statistics.median(c['render_s'] for c in r['changes']))},"
            f" iptables-restore median"
            f" {_ms(statistics.median(c['restore_s'] for c in r['changes']))}",
        ],
    ]
    if not nftables:  # nftables: element transactions over netlink, no restore
        rows.append(
            [
                "iptables lines written per change (median / max)",
                f"{statistics.median(changes.lines):.0f} / {max(changes.lines)}",
                f"restore input lines; median {statistics.median(changes.chains):.0f} chains"
                f" declared, {statistics.median(changes.deleted):.0f} deleted per change;"
                f" {r['change_table_writes']} restores for {n} changes ("
                + ", ".join(f"{k}: {v}" for k, v in sorted(changes.tables.items()))
                + ")",
            ]
        )
    for label in probes:
        us = probes[label]
        rows.append(
            [
                f"TCP connect, {label}, p50 / p99",
                f"{percentile(us, 50):.0f} / {percentile(us, 99):.0f} µs",
                f"{len(us)} connects from the client pod, interleaved"
                + (f", {failures[label]} failed" if failures[label] else ""),
            ]
        )
    rows.append(
        [
            "peak RSS of the driver",
            f"{r['rss_kb'] / 1024:.0f} MB",
            f"ru_maxrss of the driver process at the end ({r['rss_kb_after_load'] / 1024:.0f}"
            " MB right after the first apply)",
        ]
    )
    print(markdown_table(["metric", "value", "how"], rows))
    print()
    print("First apply, where the time went (seconds):")
    stages = sorted(r["stages"].items(), key=lambda kv: -kv[1])
    rows = [[k, f"{v:.3f}"] for k, v in stages if v >= 0.0005]
    rows.append(["**programmed**", f"{r['programmed_s']:.3f}"])
    print(markdown_table(["stage", "seconds"], rows))
    print()
    print(
        "Restores in the first apply: "
        + ", ".join(
            f"{c['label']} {c['lines']:,} lines {c['seconds']:.2f} s"
            for c in r["restores_first_apply"]
        )
    )
    med = statistics.median
    cs = r["changes"]
    print(
        "Backend change, medians: queued (phase 1 + deferred work, or an apply already"
        f" running) {_ms(med(c['queued_s'] for c in cs))}, apply"
        f" {_ms(med(c['apply_s'] for c in cs))} of which render"
        f" {_ms(med(c['render_s'] for c in cs))} and restore"
        f" {_ms(med(c['restore_s'] for c in cs))}; latency min {_ms(min(lat))}"
        f" max {_ms(max(lat))}; per change: "
        + ", ".join(f"{c['latency_s']:.2f}" for c in cs)
        + " s"
    )
    saves = r["saves_after_load"]
    print(
        f"Table re-reads (iptables-save) by the driver after the load: {len(saves)}"
        + (": " + ", ".join(f"{c['label']} {c['seconds']:.2f} s" for c in saves) if saves else "")
    )
    example = next((c for c in cs if c["restores"]), None)
    if example is not None:
        i = cs.index(example)
        what = r["change_log"][i]
        print(
            f"\nRestore input of change 1 ({what['service']}: backend {what['old']} ->"
            f" {what['new']}):"
        )
        for restore in example["restores"]:
            print(f"  [{restore['label']}]")
            for line in restore["text"].splitlines():
                print(f"    {line[:160]}")
    print(
        f"\napplies to in-sync {r['applies_to_in_sync']} (failures {r['apply_failures']},"
        f" total failures {r['apply_failures_total']}), rejected messages {r['rejected']},"
        f" log {r['log_bytes'] / 1e6:.1f} MB, state dump {r['dump_s']:.1f} s,"
        f" floor check (rules loaded) {r['check']}, VIPs first {r['vips']['first']}"
        f" last {r['vips']['last']}, largest child (iptables-restore etc.) RSS"
        f" {r['rss_kb_children'] / 1024:.0f} MB"
    )
    print(
        f"whole run: {r['elapsed_s']:.1f} s (1-minute load average at start"
        f" {r['loadavg'][0]:.2f}, at end {r['loadavg'][1]:.2f})"
    )


# ---------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--services", type=int, default=5000)
    parser.add_argument("--backends", type=int, default=10, help="per service")
    parser.add_argument(
        "--backend",
        choices=["nft", "legacy", "nftables"],
        default="nft",
        help="iptables-nft, iptables-legacy (kube-proxy's chains), or native nftables",
    )
    parser.add_argument("--ipv6", action="store_true", help="dual-stack services and pods")
    parser.add_argument("--changes", type=int, default=50, help="backend changes timed")
    parser.add_argument("--connects", type=int, default=300, help="connects per target")
    parser.add_argument(
        "--quick", action="store_true", help="500 services, 20 changes, 100 connects (unless given)"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the driver (to stderr)")
    parser.add_argument("--timeout", type=float, default=900, help="per step, seconds")
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--child", choices=["driver", "floor"], help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    apply_quick(args, {"services": 500, "changes": 20, "connects": 100})
    if not 3 <= args.services <= 65534 or args.backends < 1:
        parser.error("--services must be 3-65534 and --backends at least 1")
    return args


def main() -> None:
    args = parse_args()
    if args.child == "driver":
        child_driver(args)
        return
    if args.child == "floor":
        child_floor(args)
        return
    require_root()
    with sigterm_unwinds():
        result = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result))
    report(result, args)


if __name__ == "__main__":
    main()
