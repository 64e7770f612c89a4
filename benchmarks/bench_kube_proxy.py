"""Services from the API: the driver beside the real kube-proxy, one API server, one run.

The test bed's real kube-apiserver and etcd (``make upstream``) hold
``--services`` ClusterIP Services of ``--endpoints`` endpoints each (one
EndpointSlice per service, written directly). Each peer runs in a network
namespace of its own, joined to the API server by a veth:

* ``driver-nft`` / ``driver-ipt``: ``dataplane-driver`` started as Felix
  starts it (ConfigUpdate and InSync on fd 3, nothing else), with
  ``DATAPLANE_SERVICES_SOURCE=kubernetes`` and ``DATAPLANE_NFTABLES_MODE``
  enabled / disabled;
* ``kube-proxy-nft`` / ``kube-proxy-ipt``: the real kube-proxy of the same
  ``k8s.io/kubernetes`` release, ``--proxy-mode nftables`` / ``iptables``.

Measured, for each peer:

1. **programmed**: from the process start until its first complete sync
   is in the kernel (the driver's ``DataplaneInSync``; kube-proxy's first
   ``SyncProxyRules complete`` with every service: it does not sync before
   its informers have). Peers start one at a time, so none competes with
   another's start. A kube-proxy not synced within ``--deadline`` seconds
   is stopped (its peak RSS kept) and left out of the churn.
2. **one change**: ``--changes`` times, one endpoint of one random
   service's slice is replaced by a new address (``--gap`` seconds apart);
   from the API write returning until that address is in the peer's
   kernel: in each namespace a reader of nf_tables' notifications (the
   messages ``nft monitor`` reads; iptables-nft's too) timestamps the first
   one holding the address (``benchmarks/_nft_events.py``). All peers run during the churn.
3. **RSS**: the process's peak (``VmHWM``) at the end.
4. **requests**: the API server's LIST requests during the churn (its own
   ``apiserver_request_total``; the API server lists Services itself every
   3 minutes, its node-port repair loop, so the drivers' own count of lists,
   ``dataplane_kube_lists_total``, says whether a driver listed),
   and each peer's requests in all (the driver's
   ``dataplane_kube_requests_total``, kube-proxy's ``rest_client_requests_total``).
5. **its own**: the driver's mean over the churn of its
   ``dataplane_network_programming_duration_seconds`` for services, from a
   watch event's arrival to the end of the apply that took it (the steps
   after the services table's commit included): what of *one change* is
   the driver's, and what each apply costs after it.
6. **its collections**: the driver's garbage collections during the
   churn (its ``dataplane_gc_pause_seconds``): how many, their total, and
   how many took over 5 ms, any of which a change may wait behind.

Goals (issue 39): programmed <= 2 s and <= 0.5x kube-proxy nftables; one
change p99 <= 20 ms; RSS <= 150 MB; no list during the churn; at 20,000
services a change no dearer than 1.5x at 1,000.

Usage (root, ``make upstream`` done): python benchmarks/bench_kube_proxy.py
    [--services N] [--endpoints N] [--changes N] [--gap S] [--peers a,b,...]
    [--deadline S] [--driver-log DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import os
import queue
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from benchmarks._common import (  # noqa: E402
    compile_bytecode,
    machine,
    markdown_table,
    metric_sum,
    metrics_text,
    peak_rss_mb,
    percentile,
    sample_sum,
)
from benchmarks._monitor import Monitor  # noqa: E402
from benchmarks._runs import require_root  # noqa: E402
from testbed import upstream  # noqa: E402
from testbed.control_plane import ControlPlane, unavailable  # noqa: E402
from testbed.topology import Namespace, Topology, sigterm_unwinds  # noqa: E402
from tests.felix_harness import FelixHarness  # noqa: E402

NS = "bench"
DRIVER = Path(sys.executable).parent / "dataplane-driver"
PEERS = ("driver-nft", "driver-ipt", "kube-proxy-nft", "kube-proxy-ipt")


def _address(i: int) -> str:
    return f"10.{64 + i // 65536}.{(i // 256) % 256}.{i % 256}"


def _slice(name: str, addresses: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{name}-1",
            "namespace": NS,
            "labels": {"kubernetes.io/service-name": name},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": [a], "nodeName": "elsewhere", "conditions": {"ready": True}}
            for a in addresses
        ],
    }


def _client(cp: ControlPlane) -> httpx.Client:
    return httpx.Client(
        transport=httpx.HTTPTransport(uds=str(cp.socket), verify=cp.ssl_context()),
        base_url=cp.client.base_url,
        headers={"Authorization": f"Bearer {cp.token}"},
        timeout=60,
    )


def populate(cp: ControlPlane, services: int, endpoints: int) -> dict[str, list[str]]:
    """``services`` Services with one slice each; returns each slice's addresses."""
    cp.create("/api/v1/namespaces", {"metadata": {"name": NS}})
    counter = itertools.count()
    plan = {f"s{i}": [_address(next(counter)) for _ in range(endpoints)] for i in range(services)}
    local = threading.local()

    def write(item: tuple[str, list[str]]) -> None:
        name, addresses = item
        if not hasattr(local, "client"):
            local.client = _client(cp)
        client: httpx.Client = local.client
        svc = {"metadata": {"name": name}, "spec": {"ports": [{"name": "http", "port": 80}]}}
        for path, body in (
            (f"/api/v1/namespaces/{NS}/services", svc),
            (f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices", _slice(name, addresses)),
        ):
            answer = client.post(path, json=body)
            if answer.status_code >= 300:
                raise RuntimeError(f"POST {path}: {answer.status_code} {answer.text[:200]}")

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(write, plan.items()))
    return plan


def list_floor(cp: ControlPlane) -> float:
    """Seconds to list every Service and EndpointSlice, pages of 500 decoded, as
    the driver's first lists do: the part of *programmed* no peer can skip."""
    started = time.monotonic()
    with _client(cp) as client:
        for path in ("/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices"):
            token = ""
            while True:
                params = {"limit": "500", **({"continue": token} if token else {})}
                answer = client.get(path, params=params)
                answer.raise_for_status()
                token = answer.json()["metadata"].get("continue", "")
                if not token:
                    break
    return time.monotonic() - started


@dataclass
class Peer:
    name: str
    ns: Namespace
    node: str
    pid: int = 0
    programmed: float | None = 0.0  # None: not synced within --deadline (then stopped)
    peak_at_stop: float = 0.0  # MB, of a peer stopped unsynced
    latencies: list[float] = field(default_factory=list)
    missed: int = 0
    stop: Any = None
    requests: Any = None
    monitor: Monitor | None = None
    log: Any = None  # writes the driver's stderr to --driver-log's file
    lists: Any = None  # the driver's own complete lists so far (kube-proxy: not told)
    own: Any = None  # the driver's own event-to-kernel (sum s, count) so far
    gc: Any = None  # the driver's garbage collections so far (count, sum s, over 5 ms)


def start_driver(
    peer: Peer, cp: ControlPlane, kubeconfig: Path, nft: bool, log: Path | None
) -> None:
    env = {
        **os.environ,
        "DATAPLANE_PLATFORM": "linux",
        "DATAPLANE_SERVICES_SOURCE": "kubernetes",
        "DATAPLANE_KUBECONFIG": str(kubeconfig),
        "DATAPLANE_NODE_NAME": peer.node,
        "DATAPLANE_NFTABLES_MODE": "enabled" if nft else "disabled",
        "DATAPLANE_SYSCTL_STATE": str(kubeconfig.parent / f"{peer.name}.sysctls.json"),
        "DATAPLANE_LISTEN": "127.0.0.1:9095",
        "DATAPLANE_LOG_LEVEL": "INFO" if log else "WARNING",
    }
    import dataplane.wire._pb.felixbackend_pb2 as pb  # noqa: PLC0415

    started = time.monotonic()
    felix = FelixHarness(program=[str(DRIVER)], netns=peer.ns.netns, env=env, cwd=Path("/"))
    felix.send(pb.ConfigUpdate(config={"FelixHostname": peer.node}), pb.InSync())
    felix.recv_until("dataplane_in_sync", timeout=600)
    peer.programmed = time.monotonic() - started
    felix.drain()
    peer.pid = _child_pid(felix.proc.pid)
    peer.stop = felix.kill
    if log is not None:
        peer.log = lambda: log.write_text(felix.stderr_so_far())
    peer.requests = lambda: metric_sum(
        peer.ns, "http://127.0.0.1:9095/metrics", r"^dataplane_kube_requests_total "
    )
    peer.lists = lambda: metric_sum(
        peer.ns, "http://127.0.0.1:9095/metrics", r"^dataplane_kube_lists_total"
    )
    latency = r'^dataplane_network_programming_duration_seconds_{}\{{kind="kube_service"\}}'

    def own() -> tuple[float, float]:
        text = metrics_text(peer.ns, "http://127.0.0.1:9095/metrics")  # one scrape for both
        return sample_sum(text, latency.format("sum")), sample_sum(text, latency.format("count"))

    peer.own = own

    def collections() -> tuple[float, float, float]:
        text = metrics_text(peer.ns, "http://127.0.0.1:9095/metrics")
        pauses = r"^dataplane_gc_pause_seconds_{}\{{generation"
        count = sample_sum(text, pauses.format("count"))
        quick = sample_sum(text, pauses.format("bucket") + r'.*le="0.005"')
        return count, sample_sum(text, pauses.format("sum")), count - quick

    peer.gc = collections


def _child_pid(pid: int) -> int:
    """The driver's pid (``ip netns exec`` execs it, so the same)."""
    return pid


def start_kube_proxy(
    peer: Peer, kubeconfig: Path, mode: str, services: int, deadline: float
) -> None:
    binary = upstream.binary(f"kube-proxy-{upstream.K8S}")
    argv = [
        "ip", "netns", "exec", peer.ns.netns, str(binary),
        f"--kubeconfig={kubeconfig}", f"--hostname-override={peer.node}",
        f"--proxy-mode={mode}", "--conntrack-max-per-core=0",
        "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
        "--healthz-bind-address=127.0.0.1:10256", "--metrics-bind-address=127.0.0.1:10249",
        "--v=2",
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    end = started + deadline
    while True:
        try:
            line = lines.get(timeout=max(0.1, end - time.monotonic()))
        except queue.Empty:
            line = ""
        if time.monotonic() > end:
            # Not synced in time: stopped, so its work does not slow the others.
            peer.programmed, peer.peak_at_stop = None, peak_rss_mb(proc.pid)
            proc.kill()
            proc.wait()
            return
        if "SyncProxyRules complete" not in line:
            continue
        # Its first sync waits for both informers; checked, not timed.
        peer.programmed = time.monotonic() - started
        if _programmed(peer, services, mode):
            break
    peer.pid = proc.pid
    peer.stop = proc.kill
    peer.requests = lambda: metric_sum(
        peer.ns, "http://127.0.0.1:10249/metrics", r"^rest_client_requests_total"
    )


def _programmed(peer: Peer, services: int, mode: str) -> bool:
    """kube-proxy's rules name every service (a sanity check of its first sync)."""
    tool = (
        ["nft", "list", "map", "ip", "kube-proxy", "service-ips"]
        if mode == "nftables"
        else ["iptables-nft-save", "-t", "nat"]
    )
    argv = ["ip", "netns", "exec", peer.ns.netns, *tool]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False).stdout
    return len(set(re.findall(rf"{NS}/(s\d+)", out))) >= services


def churn(cp: ControlPlane, plan: dict[str, list[str]], peers: list[Peer], args: Any) -> None:
    client = _client(cp)
    fresh = itertools.count(len(plan) * args.endpoints + 1)
    names = list(plan)
    rng = random.Random(39)
    path = f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"
    for _ in range(args.changes):
        name = rng.choice(names)
        address = _address(next(fresh))
        plan[name][rng.randrange(len(plan[name]))] = address
        for peer in peers:
            assert peer.monitor is not None
            peer.monitor.expect(address)
        current = client.get(f"{path}/{name}-1").json()
        body = _slice(name, plan[name])
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        answer = client.put(f"{path}/{name}-1", json=body)
        written = time.monotonic()
        if answer.status_code >= 300:
            raise RuntimeError(f"PUT slice: {answer.status_code} {answer.text[:200]}")
        for peer in peers:
            assert peer.monitor is not None
            seen = peer.monitor.wait(address, written + 10)
            if seen is None:
                peer.missed += 1
                lost = sum(at >= written for at in peer.monitor.overruns)
                print(
                    f"{peer.name}: {address} ({name}) not in force 10 s after the write"
                    f" at {time.strftime('%H:%M:%S')}"
                    + (f" (the reader dropped notifications {lost} times)" if lost else ""),
                    flush=True,
                )
            else:
                peer.latencies.append(max(0.0, seen - written))
        time.sleep(args.gap)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--services", type=int, default=10000)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--gap", type=float, default=1.1, help="seconds between changes")
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument(
        "--deadline",
        type=float,
        default=900,
        help="seconds a kube-proxy has to sync, or it is stopped",
    )
    parser.add_argument(
        "--driver-log", type=Path, help="keep each driver's log (INFO) in DIR/PEER.log"
    )
    args = parser.parse_args()
    require_root()
    why = unavailable() or _no_kube_proxy()
    if why:
        sys.exit(f"bench_kube_proxy: {why}")
    print(machine())
    print(compile_bytecode())  # programmed counts the driver's start
    with sigterm_unwinds(), tempfile.TemporaryDirectory() as tmp, Topology() as topo:
        work = Path(tmp)
        cp = ControlPlane(topo, work)
        cp.start()
        try:
            run(cp, topo, work, args)
        finally:
            cp.stop()


def _no_kube_proxy() -> str | None:
    try:
        upstream.binary(f"kube-proxy-{upstream.K8S}")
    except upstream.UnavailableError as exc:
        return str(exc)
    return None


def run(cp: ControlPlane, topo: Topology, work: Path, args: Any) -> None:
    started = time.monotonic()
    plan = populate(cp, args.services, args.endpoints)
    print(
        f"stored {args.services} services x {args.endpoints} endpoints"
        f" in {time.monotonic() - started:.1f} s",
        flush=True,
    )
    print(f"the API's lists alone (the floor): {list_floor(cp):.2f} s", flush=True)
    peers: list[Peer] = []
    unsynced: list[Peer] = []  # kube-proxy not synced within --deadline: not in the churn
    for name in args.peers.split(","):
        ns = Namespace(topo, name, topo.new_netns(name[:3] + name[-3:]))
        topo.adopt(ns)
        ns.ip("link", "set", "lo", "up")
        config = work / f"{name}.kubeconfig"
        config.write_text(cp.kubeconfig(cp.attach(ns)))
        peer = Peer(name, ns, f"bench-{name}")
        cp.create("/api/v1/nodes", {"metadata": {"name": peer.node}})
        # kube-proxy waits (30 s) for its Node to have an address, as a kubelet sets it.
        address = {"type": "InternalIP", "address": cp.attached[ns.netns]}
        cp.patch_status(f"/api/v1/nodes/{peer.node}", {"addresses": [address]})
        if name.startswith("driver"):
            log = args.driver_log / f"{name}.log" if args.driver_log else None
            start_driver(peer, cp, config, nft=name.endswith("nft"), log=log)
        else:
            mode = "nftables" if name.endswith("nft") else "iptables"
            start_kube_proxy(peer, config, mode, args.services, args.deadline)
        if peer.programmed is None:
            print(f"{name}: not synced in {args.deadline:g} s, stopped", flush=True)
            unsynced.append(peer)
            continue
        print(f"{name}: programmed in {peer.programmed:.2f} s", flush=True)
        peers.append(peer)
    try:
        for peer in peers:
            peer.monitor = Monitor(peer.ns)
        time.sleep(1.0)  # the monitors are listening
        lists_before = _apiserver_lists(cp)
        requests_before = {p.name: p.requests() for p in peers}
        own_lists_before = {p.name: p.lists() for p in peers if p.lists is not None}
        own_before = {p.name: p.own() for p in peers if p.own is not None}
        gc_before = {p.name: p.gc() for p in peers if p.gc is not None}
        churn(cp, plan, peers, args)
        lists = _apiserver_lists(cp) - lists_before
        lists_during = sum(lists.values())
        by_resource = ", ".join(f"{n} {r}" for r, n in sorted(lists.items())) or "none"
        rows = []
        for peer in peers:
            lat = [x * 1000 for x in peer.latencies]
            rows.append(
                [
                    peer.name,
                    f"{peer.programmed:.2f} s",
                    f"{percentile(lat, 50):.1f} / {percentile(lat, 99):.1f} ms",
                    str(peer.missed),
                    f"{peak_rss_mb(peer.pid):.0f} MB",
                    f"{peer.requests() - requests_before[peer.name]:.0f}",
                    _own_lists(peer, own_lists_before),
                    _own_latency(peer, own_before),
                    _collections(peer, gc_before),
                ]
            )
        for peer in unsynced:
            not_yet = f"not synced in {args.deadline:g} s"
            rows.append(
                [peer.name, not_yet, "-", "-", f"{peer.peak_at_stop:.0f} MB", "-", "-", "-", "-"]
            )
        header = ["peer", "programmed", "one change p50 / p99", "missed", "peak RSS"]
        header += ["requests", "its lists", "its own event to kernel, mean"]
        header += ["its collections: count / total / over 5 ms"]
        print(
            f"\n{args.services:,} services x {args.endpoints} endpoints, {args.changes} changes"
            f" {args.gap:g} s apart; LIST requests to the API server during the churn:"
            f" {lists_during:.0f} ({by_resource})\n"
        )
        print(markdown_table(header, rows))
    finally:
        for peer in peers:
            if peer.monitor is not None:
                peer.monitor.stop()
            if peer.log is not None:
                peer.log()
            if peer.stop is not None:
                peer.stop()


def _own_lists(peer: Peer, before: dict[str, float]) -> str:
    """The lists a driver counted itself since ``before`` ("-": kube-proxy does not say)."""
    return "-" if peer.lists is None else f"{peer.lists() - before[peer.name]:.0f}"


def _own_latency(peer: Peer, before: dict[str, tuple[float, float]]) -> str:
    """The driver's mean from receiving a watch event to that change in the kernel
    during the churn ("-": kube-proxy does not say): the rest of *one change*
    is the API server's delivery and the event's way to the kernel's notification."""
    if peer.own is None:
        return "-"
    (total, count), (total0, count0) = peer.own(), before[peer.name]
    return f"{(total - total0) / (count - count0) * 1000:.1f} ms" if count > count0 else "-"


def _collections(peer: Peer, before: dict[str, tuple[float, float, float]]) -> str:
    """The driver's garbage collections during the churn, from its own
    ``dataplane_gc_pause_seconds`` ("-": kube-proxy does not say)."""
    if peer.gc is None:
        return "-"
    (count, total, slow), (count0, total0, slow0) = peer.gc(), before[peer.name]
    return f"{count - count0:.0f} / {(total - total0) * 1000:.1f} ms / {slow - slow0:.0f}"


def _apiserver_lists(cp: ControlPlane) -> Counter[str]:
    """The API server's LIST requests so far, by resource (its own metric)."""
    text = cp.client.get("/metrics").text
    out: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{") and 'verb="LIST"' in line:
            resource = re.search(r'resource="([^"]*)"', line)
            out[resource.group(1) if resource else "?"] += int(float(line.rsplit(" ", 1)[1]))
    return out


if __name__ == "__main__":
    main()
