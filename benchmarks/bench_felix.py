"""The real Felix in the loop: a node of 1,000 pods from the API, then new pods.

For each backend (``FELIX_NFTABLESMODE`` Enabled: our nftables tables;
Disabled: iptables, which on a fresh node is iptables-nft), a cluster of
its own: the test bed's kube-apiserver and etcd, and Calico of one release
built from ``../shared/upstream`` (``make upstream``): its CRDs, the real
calico-node start-up for the node, an IPv4 pool. Then ``--pods`` pods in
``--namespaces`` namespaces, each namespace with three NetworkPolicies
(default deny ingress, ingress from two app groups of a team's namespaces on
a named port, egress to its own app group and to an ipBlock with an
except). The pods are hand-made at this size (tests/felix proves the CNI
plugin's path pod by pod): each Pod is written to the API with
``spec.nodeName`` and Calico's ``podIP``/``podIPs`` annotations, as the CNI
plugin leaves them, and its veth is waiting in the node namespace, named as
Calico names it (``cali`` + 11 hex digits of SHA-1 of "namespace.pod"),
its peer in a namespace holding every pod's end.

Then the real calico-felix starts (KDD, our ``dataplane-driver`` as its
``DataplaneDriver``), behind ``benchmarks/_felix_relay.py``, which
timestamps every frame on fd 3 and fd 4 (one pipe hop more for the driver).

Measured, on each backend:

1. **the whole node**: from Felix's first frame on fd 3 until the driver's
   first apply is done (its DataplaneInSync, which the relay keeps from
   Felix), split into Felix's stream (first frame to its InSync) and the
   driver's part after the InSync. Felix's own start (process start to the
   first frame) beside it.
2. **floor**: what the driver programmed (``benchmarks/_floor.py``) loaded
   into a fresh namespace holding the same interfaces: ``nft -f`` or
   ``ipset restore`` + ``iptables-nft-restore``, plus ``ip -batch`` of the
   routes. The goal (issue 46): the whole node ≤ 1.2x this.
3. **a new pod**: ``--additions`` times, ``--gap`` seconds apart, one more
   pod (a replica: an existing app group's labels, in its namespace) is
   written to the API. *Total*: from the write until the first nf_tables
   notification naming its interface (``benchmarks/_nft_events.py``: a
   chain, rule or map element of it is in the kernel). *Felix*: from the
   write until its WorkloadEndpointUpdate is on fd 3. *Ours*: from that
   frame to the notification. Goal for ours: p99 ≤ 15 ms on nftables.
4. **peak RSS** of the driver (``VmHWM``) and of Felix.

Needs root, ``make upstream`` (Calico and Kubernetes built), ``nft``,
``ip``, ``ipset``, ``iptables-nft``.

Usage: python benchmarks/bench_felix.py [--pods N] [--namespaces N]
       [--additions N] [--gap S] [--backends nftables,iptables] [--release R]
       [--quick]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _floor
from benchmarks._common import (
    compile_bytecode,
    machine,
    markdown_table,
    metrics_text,
    peak_rss_mb,
    percentile,
    sample_sum,
)
from benchmarks._monitor import Monitor
from benchmarks._runs import apply_quick, require_root, run_child
from testbed.calico import Calico
from testbed.calico import unavailable as calico_unavailable
from testbed.control_plane import ControlPlane
from testbed.control_plane import unavailable as cp_unavailable
from testbed.felix import Felix
from testbed.node import calico_iface
from testbed.topology import Node, Topology, sigterm_unwinds

SCRIPT = Path(__file__).resolve()
RELAY = SCRIPT.with_name("_felix_relay.py")
BACKENDS = {"nftables": "Enabled", "iptables": "Disabled"}
APPS = 10  # app groups per namespace
PORT = 8080
OPS_PORT = 9095  # the driver's /metrics, on the node's loopback
ADDITIONS_BLOCK = 200  # the pods' addresses: 10.65.0.0/16 past Calico's own blocks


# ---------------------------------------------------------------------------
# The node's objects
# ---------------------------------------------------------------------------


def _ip(index: int) -> str:
    number = ADDITIONS_BLOCK * 256 + index
    return f"10.65.{number >> 8}.{number & 255}"


@dataclass(frozen=True)
class PodPlan:
    namespace: str
    name: str
    app: str
    ip: str

    @property
    def iface(self) -> str:
        return calico_iface(f"{self.namespace}.{self.name}")

    @property
    def peer(self) -> str:
        return calico_iface(f"{self.namespace}.{self.name}", prefix="pe")

    def body(self, node: str) -> dict[str, Any]:
        return {
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app": self.app},
                "annotations": {
                    "cni.projectcalico.org/podIP": f"{self.ip}/32",
                    "cni.projectcalico.org/podIPs": f"{self.ip}/32",
                },
            },
            "spec": {
                "nodeName": node,
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": "main",
                        "image": "none",
                        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
                    }
                ],
            },
        }


def plan(pods: int, namespaces: int, additions: int) -> tuple[list[PodPlan], list[PodPlan]]:
    """The loaded pods and the additions (replicas of loaded app groups)."""

    def pod(i: int, name: str) -> PodPlan:
        return PodPlan(f"ns{i % namespaces}", name, f"a{(i // namespaces) % APPS}", _ip(i))

    loaded = [pod(i, f"pod-{i}") for i in range(pods)]
    return loaded, [pod(pods + i, f"add-{i}") for i in range(additions)]


def _team(index: int) -> str:
    return f"t{index % 4}"


def policies(namespace_index: int) -> list[dict[str, Any]]:
    """Three NetworkPolicies of one namespace."""
    team = _team(namespace_index)
    group = {"matchLabels": {"app": f"a{namespace_index % APPS}"}}
    return [
        {"metadata": {"name": "default-deny"}, "spec": {"podSelector": {}}},
        {
            "metadata": {"name": "from-team"},
            "spec": {
                "podSelector": {
                    "matchExpressions": [{"key": "app", "operator": "In", "values": ["a0", "a1"]}]
                },
                "ingress": [
                    {
                        "from": [{"namespaceSelector": {"matchLabels": {"team": team}}}],
                        "ports": [{"port": "http", "protocol": "TCP"}],
                    }
                ],
            },
        },
        {
            "metadata": {"name": "egress"},
            "spec": {
                "podSelector": group,
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [
                            {"podSelector": {"matchLabels": {"app": f"a{namespace_index % APPS}"}}}
                        ]
                    },
                    {
                        "to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}],
                        "ports": [{"port": 443, "protocol": "TCP"}],
                    },
                ],
            },
        },
    ]


def populate(cp: ControlPlane, node: str, pods: list[PodPlan], namespaces: int) -> float:
    """Namespaces, their policies and the pods in the API; the seconds it took."""
    started = time.monotonic()
    for i in range(namespaces):
        ns = f"ns{i}"
        cp.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": {"team": _team(i)}}})
        for policy in policies(i):
            cp.create(f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies", policy)
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(
            pool.map(
                lambda pod: cp.create(f"/api/v1/namespaces/{pod.namespace}/pods", pod.body(node)),
                pods,
            )
        )
    return time.monotonic() - started


# ---------------------------------------------------------------------------
# Felix behind the relay
# ---------------------------------------------------------------------------


@dataclass
class RelayLog:
    """What the relay wrote: frames in and out, timestamped."""

    path: Path
    lines: list[tuple[float, str, str, str]] = field(default_factory=list)
    _offset: int = 0

    def read(self) -> None:
        if not self.path.exists():
            return
        with self.path.open() as f:
            f.seek(self._offset)
            text = f.read()
        complete = text[: text.rfind("\n") + 1]
        self._offset += len(complete.encode())
        for line in complete.splitlines():
            at, direction, rest = line.split(" ", 2)
            kind, _, ident = rest.partition(" ")
            self.lines.append((float(at), direction, kind, ident))

    def first(self, direction: str, kind: str | None = None, ident: str = "") -> float | None:
        for at, d, k, i in self.lines:
            if d == direction and (kind is None or k == kind) and (not ident or i == ident):
                return at
        return None

    def wait(
        self, direction: str, kind: str, ident: str = "", deadline: float = 0.0
    ) -> float | None:
        while True:
            self.read()
            if (at := self.first(direction, kind, ident)) is not None:
                return at
            if time.monotonic() > deadline:
                return None
            time.sleep(0.005)  # polling a file another process appends to

    def driver_pid(self) -> int:
        """The relay's first line: ``T pid N``."""
        self.read()
        for _, direction, kind, _ in self.lines:
            if direction == "pid":
                return int(kind)
        raise RuntimeError(f"no driver pid in {self.path}")


def relay_command(workdir: Path) -> Path:
    """An executable Felix can start as its DataplaneDriver: the relay, this interpreter."""
    wrapper = workdir / "dataplane-driver-relay"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {RELAY} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return wrapper


# ---------------------------------------------------------------------------
# One backend
# ---------------------------------------------------------------------------


def _veths(topo: Topology, netns: str, pods: list[PodPlan]) -> str:
    """Each pod's veth in ``netns``, the peers in a namespace of their own; its name."""
    peers = topo.new_netns("pds")
    topo.add_veths(netns, [(p.iface, p.peer) for p in pods], peers)
    return peers


def _felix_pid(felix: Felix) -> int:
    """``ip netns exec`` execs Felix: the same process."""
    return felix.proc.pid


def run_backend(backend: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    loaded, additions = plan(args.pods, args.namespaces, args.additions)
    result: dict[str, Any] = {"backend": backend}
    with Topology() as topo, ControlPlane(topo, workdir) as cp:
        calico = Calico(cp, args.release, workdir)
        calico.install()
        node: Node = topo.add_node("node-1")
        calico.add_node(node)
        started = time.monotonic()
        _veths(topo, node.netns, loaded + additions)
        result["veths_s"] = time.monotonic() - started
        result["populate_s"] = populate(cp, "node-1", loaded, args.namespaces)
        print(
            f"[{backend}] {len(loaded)} pods in the API in {result['populate_s']:.1f} s,"
            f" {len(loaded) + len(additions)} veths in {result['veths_s']:.1f} s",
            flush=True,
        )
        relay = RelayLog(workdir / f"relay-{backend}.log")
        env = {
            "FELIX_NFTABLESMODE": BACKENDS[backend],
            "FELIX_DATAPLANEDRIVER": str(relay_command(workdir)),
            "DATAPLANE_BENCH_RELAY_LOG": str(relay.path),
            "DATAPLANE_LISTEN": f"127.0.0.1:{OPS_PORT}",
        }
        felix_started = time.monotonic()
        felix = calico.start_felix(node, env)
        try:
            measure_start(result, relay, felix_started, args.timeout)
            result["own_start"] = own_figures(node)
            driver = relay.driver_pid()
            save = ["--child", "save", "--backend", backend, "--workdir", str(workdir)]
            run_child(node.netns, SCRIPT, save, timeout=args.timeout)
            result["saved"] = json.loads((workdir / "saved.json").read_text())
            before = own_figures(node)
            measure_additions(result, relay, node, cp, additions=additions, args=args)
            after = own_figures(node)
            result["own_additions"] = {k: after[k] - before[k] for k in after}
            result["driver_rss_mb"] = peak_rss_mb(driver)
            result["felix_rss_mb"] = peak_rss_mb(_felix_pid(felix))
        finally:
            code = felix.stop()
            print(f"[{backend}] Felix stopped (exit {code}); its log: {felix.log_path}")
    # The floor: the same interfaces in fresh namespaces, then the plain tools.
    with Topology() as topo:
        floor_ns = topo.new_netns("flr")
        _veths(topo, floor_ns, loaded + additions)
        load = ["--child", "floor", "--backend", backend, "--workdir", str(workdir)]
        run_child(floor_ns, SCRIPT, load, timeout=args.timeout)
    result.update(json.loads((workdir / "floor.json").read_text()))
    return result


def own_figures(node: Node) -> dict[str, float]:
    """The driver's own account (its /metrics): its initial resync, its applies so far,
    and its receipt-to-programmed latency of endpoints."""
    url = f"http://127.0.0.1:{OPS_PORT}/metrics"
    latency = r'^dataplane_network_programming_duration_seconds_{}\{{kind="workload_endpoint"\}}'
    patterns = {
        "initial_resync_s": r"^felix_int_dataplane_initial_resync_time_seconds ",
        "apply_s": r"^dataplane_apply_duration_seconds_sum ",
        "applies": r"^dataplane_apply_duration_seconds_count ",
        "complete_s": r'^dataplane_phase_duration_seconds_sum\{phase="complete"\}',
        "program_s": r'^dataplane_phase_duration_seconds_sum\{phase="program"\}',
        "endpoint_latency_s": latency.format("sum"),
        "endpoints": latency.format("count"),
    }
    text = metrics_text(node, url)  # one scrape for all of them
    return {name: sample_sum(text, pattern) for name, pattern in patterns.items()}


def measure_start(
    result: dict[str, Any], relay: RelayLog, felix_started: float, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    done = relay.wait("out", "dataplane_in_sync", deadline=deadline)
    if done is None:
        raise RuntimeError(f"the driver did not program the node in {timeout:.0f} s")
    first = relay.first("in")
    in_sync = relay.first("in", "in_sync")
    assert first is not None and in_sync is not None  # the driver answered InSync
    result["felix_start_s"] = first - felix_started
    (spawned,) = (at for at, direction, _, _ in relay.lines if direction == "pid")
    result["driver_spawned_before_first_frame_s"] = first - spawned
    result["programmed_s"] = done - first
    result["felix_stream_s"] = in_sync - first
    result["ours_after_in_sync_s"] = done - in_sync
    result["frames_in"] = sum(1 for _, d, _, _ in relay.lines if d == "in")
    result["endpoints_in"] = sum(
        1 for _, d, k, _ in relay.lines if d == "in" and k == "workload_endpoint_update"
    )
    print(
        f"[{result['backend']}] programmed {result['programmed_s']:.2f} s from Felix's first"
        f" frame ({result['frames_in']} frames, {result['endpoints_in']} endpoints)",
        flush=True,
    )


def measure_additions(
    result: dict[str, Any],
    relay: RelayLog,
    node: Node,
    cp: ControlPlane,
    *,
    additions: list[PodPlan],
    args: argparse.Namespace,
) -> None:
    monitor = Monitor(node)
    rng = random.Random(7)
    rows: list[tuple[float, float, float]] = []
    missed = 0
    try:
        for pod in additions:
            time.sleep(args.gap * rng.uniform(0.5, 1.5))  # the pods come apart in time
            monitor.expect(pod.iface)
            written = time.monotonic()
            cp.create(f"/api/v1/namespaces/{pod.namespace}/pods", pod.body("node-1"))
            ident = f"{pod.namespace}/{pod.name}"
            frame = relay.wait("in", "workload_endpoint_update", ident, written + args.timeout)
            committed = monitor.wait(pod.iface, written + args.timeout)
            if frame is None or committed is None:
                missed += 1
                continue
            rows.append((committed - written, frame - written, committed - frame))
    finally:
        monitor.stop()
    result["additions"] = rows
    result["missed"] = missed
    result["overruns"] = len(monitor.overruns)


# ---------------------------------------------------------------------------
# Children inside a namespace
# ---------------------------------------------------------------------------


def _route_protocol() -> int:
    """The protocol of the driver's routes to its endpoints (Felix's DeviceRouteProtocol)."""
    text = subprocess.run(
        ["ip", "-j", "-4", "route", "show", "table", "main"], capture_output=True, check=True
    ).stdout
    protocols = {
        r["protocol"] for r in json.loads(text or "[]") if r.get("dev", "").startswith("cali")
    }
    if len(protocols) != 1:
        raise RuntimeError(f"the endpoints' routes have protocols {sorted(protocols)}")
    (protocol,) = protocols
    names = {"boot": 3, "static": 4, "kernel": 2}
    return names[protocol] if protocol in names else int(protocol)


def _iptables_mode() -> str:
    """Which iptables the driver chose: the one holding its rules."""
    counts = {
        mode: subprocess.run([f"iptables-{mode}-save"], capture_output=True, check=True)
        .stdout.decode()
        .count("cali")
        for mode in ("legacy", "nft")
    }
    return max(counts, key=lambda mode: counts[mode])


def child(args: argparse.Namespace) -> None:
    workdir = Path(args.workdir)
    tools = "nftables" if args.backend == "nftables" else _iptables_mode()
    if args.child == "save":
        saved = _floor.save(tools, workdir, _route_protocol()) | {"tools": tools}
        (workdir / "saved.json").write_text(json.dumps(saved))
    else:
        tools = json.loads((workdir / "saved.json").read_text())["tools"]
        (workdir / "floor.json").write_text(json.dumps(_floor.load(tools, workdir)))


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def _ms(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{percentile(values, 50) * 1000:.1f} / {percentile(values, 99) * 1000:.1f} ms"


def _per(total: float, count: float) -> str:
    return f"{total / count * 1000:.1f} ms" if count else "-"


def _floor_text(r: dict[str, Any]) -> tuple[float, str]:
    floor = r["floor"]
    total = float(sum(floor.values()))
    if "nft" in floor:
        return total, f"{total:.2f} s ({floor['nft']:.2f} nft -f + {floor['routes']:.2f} routes)"
    tables = floor["iptables"] + floor["ip6tables"]
    return total, (
        f"{total:.2f} s ({floor['ipset']:.2f} ipset + {tables:.2f} iptables-{r['saved']['tools']}"
        f" + {floor['routes']:.2f} routes)"
    )


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print()
    print(
        f"Node: {args.pods:,} pods in {args.namespaces} namespaces (3 NetworkPolicies each),"
        f" Calico {args.release}, real calico-felix; {args.additions} new pods, one at a time."
    )
    print(f"Machine: {machine()}")
    print()
    header = [
        "backend",
        "whole node: Felix's first frame → programmed",
        "Felix's stream / ours after its InSync",
        "floor",
        "whole / floor",
        "new pod, total p50 / p99",
        "Felix's share p50 / p99",
        "ours p50 / p99",
        "driver RSS",
    ]
    rows = []
    for r in results:
        floor_total, floor_text = _floor_text(r)
        total, felix, ours = ([row[i] for row in r["additions"]] for i in range(3))
        rows.append(
            [
                r["backend"],
                f"{r['programmed_s']:.2f} s",
                f"{r['felix_stream_s']:.2f} s / {r['ours_after_in_sync_s']:.2f} s",
                floor_text,
                f"{r['programmed_s'] / floor_total:.1f}x",
                _ms(total),
                _ms(felix),
                _ms(ours),
                f"{r['driver_rss_mb']:.0f} MB",
            ]
        )
    print(markdown_table(header, rows))
    print()
    for r in results:
        s = r["saved"]
        print(
            f"[{r['backend']}] Felix start to first frame {r['felix_start_s']:.2f} s;"
            f" {r['frames_in']} frames, {r['endpoints_in']} endpoints before in-sync;"
            f" programmed: {s['rules_v4']:,} rules, {s['chains_v4']:,} chains, {s['sets']} sets,"
            f" {s['routes']:,} routes; floor check {r['check']}; pods in the API"
            f" {r['populate_s']:.1f} s; additions missed {r['missed']}, reader overruns"
            f" {r['overruns']}; Felix RSS {r['felix_rss_mb']:.0f} MB"
        )
        start, adds = r["own_start"], r["own_additions"]
        ours = [row[2] for row in r["additions"]]
        print(
            f"[{r['backend']}] the driver's own account: started"
            f" {r['driver_spawned_before_first_frame_s']:.2f} s before Felix's first frame;"
            f" first message taken to first apply done {start['initial_resync_s']:.2f} s"
            f" ({start['applies']:.0f} applies, {start['apply_s']:.2f} s in them: complete"
            f" {start['complete_s']:.2f} s, program {start['program_s']:.2f} s);"
            f" during the new pods {adds['applies']:.0f} applies of"
            f" {_per(adds['apply_s'], adds['applies'])} mean (complete"
            f" {_per(adds['complete_s'], adds['applies'])}, program"
            f" {_per(adds['program_s'], adds['applies'])}), an endpoint's receipt to"
            f" programmed {_per(adds['endpoint_latency_s'], adds['endpoints'])} mean"
            f" ({adds['endpoints']:.0f}) against the frame to commit"
            f" {_per(sum(ours), len(ours))} mean"
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--additions", type=int, default=50)
    parser.add_argument("--gap", type=float, default=0.3, help="mean seconds between new pods")
    parser.add_argument("--backends", default="nftables,iptables")
    parser.add_argument("--release", default="v3.31.7", help="Calico release (make upstream)")
    parser.add_argument("--timeout", type=float, default=300, help="per step, seconds")
    parser.add_argument("--quick", action="store_true", help="100 pods, 5 namespaces, 10 new")
    parser.add_argument(
        "--keep", action="store_true", help="keep each backend's directory: logs, saved state"
    )
    parser.add_argument("--child", choices=["save", "floor"], help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    apply_quick(args, {"pods": 100, "namespaces": 5, "additions": 10})
    return args


def _workdirs(backends: list[str], keep: bool) -> Iterator[tuple[str, Path]]:
    for backend in backends:
        workdir = Path(tempfile.mkdtemp(prefix=f"bench-felix-{backend}-"))
        try:
            yield backend, workdir
        finally:
            if keep:
                print(f"[{backend}] logs and saved state kept in {workdir}")
            else:
                shutil.rmtree(workdir)


def main() -> None:
    args = parse_args()
    if args.child:
        child(args)
        return
    require_root()
    for why in (cp_unavailable(), calico_unavailable(args.release)):
        if why is not None:
            sys.exit(f"cannot run: {why} (make upstream)")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        sys.exit(f"unknown backends {sorted(unknown)}: choose from {sorted(BACKENDS)}")
    print(compile_bytecode())  # Felix starts the driver: its start is in the figures
    results = []
    with sigterm_unwinds():
        for backend, workdir in _workdirs(backends, args.keep):
            os.chmod(workdir, 0o755)
            results.append(run_backend(backend, args, workdir))
    report(results, args)


if __name__ == "__main__":
    main()
