"""The nftables services table at scale: full load, one backend change, memory.

In a throwaway namespace, ``ServiceTable`` (``dataplane/linux/nftables/``)
is given ``--sizes`` ClusterIP services (default 1,000, 5,000 and
20,000) of ``--backends`` backends (default 10), one TCP port
80 -> 8080, addresses that need not exist. Measured for each size, each in
a fresh table:

1. **programmed**: ``set_service`` of every service and the first
   ``apply`` (the table's structure through ``nft -f``, then every element
   in one transaction through our writer);
2. **floor**: the same table and elements as one ``nft -f`` script, into
   an empty table of its own (the tool's parser and one commit);
3. **one backend change**: ``--changes`` times (default 100) one random
   service has one backend replaced, timed from ``set_service`` until
   the new backend is in force (the writer returns from the kernel's
   commit of the transaction that put it there: the second bank's
   add-only one) and until ``apply`` returns (the first bank rewritten,
   a deletion the kernel commits after an RCU grace period); every
   change must be elements only (the benchmark fails if ``nft`` ran);
4. **connect**: 300 shuffled rounds of TCP ``connect()`` from the
   namespace to the first and the last service's VIP (both then given one
   backend, a listener on a veth of the namespace) and straight
   to the listener, timed around ``connect()``;
5. **kube-proxy's nftables layout** (a service chain choosing endpoint
   chains through an anonymous verdict map, a verdict map of service
   IPs), up to ``--kube-proxy-max`` services: loaded by one ``nft -f``,
   then 20 backend changes, each one ``nft -f`` as its proxier writes it;
6. **refresh**: the table read back beside the applies (every set dumped
   through netlink and compared, the rules hashed; nothing may differ):
   how long, and the longest the trio loop went without running
   meanwhile (a task waking every millisecond);
7. **peak RSS** of the process measuring that size, before the floor's
   script is built (``ru_maxrss``: the interpreter, the model and the
   desired elements held in memory); each size runs in a process and a
   namespace of its own.

The issue's goals: 5,000 x 10 programmed <= 2 s; one backend change p99
<= 15 ms at 5,000 services, and at 20,000 no more than 1.5x the 1,000
figure; connect to the last VIP <= 1.1x the first; peak RSS <= 150 MB.

Usage (root, nft installed): python benchmarks/bench_nft_services.py
    [--sizes 1000,5000,20000] [--backends N] [--changes N] [--kube-proxy-max N]
It re-executes itself inside the namespace it creates.
"""

from __future__ import annotations

import argparse
import random
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine, markdown_table, percentile, run_inside_netns
from dataplane.core.heap import HeapFreezer
from dataplane.linux.kernel.cmd import ProcessRunner
from dataplane.linux.nftables.elements import ElementChange, ElementWriter
from dataplane.linux.nftables.reader import TableReader
from dataplane.linux.nftables.service_layout import ServiceLayout, slot_count
from dataplane.linux.nftables.service_table import ServiceTable
from dataplane.model.services import Backend, BackendPort, Service, ServiceKey, ServicePort

MASQ = 0x4000000
PORTS = (ServicePort("http", "tcp", 80),)
TO = (BackendPort("http", "tcp", 8080),)


def vip(i: int) -> str:
    return f"10.96.{i // 250}.{i % 250 + 1}"


def address(k: int) -> str:
    return f"10.{64 + k // 65536}.{(k // 256) % 256}.{k % 256}"


def service(i: int, first: int, backends: int) -> Service:
    members = tuple(Backend(address(first + j), TO) for j in range(backends))
    return Service(
        ServiceKey("bench", f"svc-{i}"), cluster_ips=(vip(i),), ports=PORTS, backends=members
    )


def floor_script(layout: ServiceLayout, services: int, backends: int) -> str:
    """The same table as text for nft -f: structure, then every element."""
    t = f"ip {layout.table}"
    count = slot_count(backends)
    lines = [layout.structure(["10.65.0.0/16"])]
    fe = [f"{vip(i)} . tcp . 80" for i in range(services)]
    addrs = [
        f"{vip(i)} . tcp . 80 . {s} : {address(i * backends + s % backends)}"
        for i in range(services)
        for s in range(count)
    ]
    ports = [f"{vip(i)} . tcp . 80 . {s} : 8080" for i in range(services) for s in range(count)]
    remote = [address(k) for k in range(services * backends)]
    for name, values in (
        ("fe", fe),
        (f"fe_{count}", fe),
        ("addr", addrs),
        ("port", ports),
        ("remote", remote),
    ):
        for start in range(0, len(values), 2000):
            lines.append(f"add element {t} {name} {{ {', '.join(values[start : start + 2000])} }}")
    return "\n".join(lines) + "\n"


def kube_proxy_chains(i: int, members: Sequence[str]) -> list[str]:
    """One service in kube-proxy's nftables layout (its proxier's chains):
    a service chain choosing an endpoint chain through an anonymous verdict
    map, an endpoint chain per backend."""
    t = "ip kube-proxy"
    svc = f"service-{i}-bench/svc-{i}/tcp/http"
    lines = []
    endpoints = []
    for address in members:
        ep = f"endpoint-{i}-bench/svc-{i}/tcp/http__{address}/8080"
        endpoints.append(ep)
        lines += [
            f"add chain {t} {ep}",
            f"add rule {t} {ep} ip saddr {address} jump mark-for-masquerade",
            f"add rule {t} {ep} meta l4proto tcp dnat to {address}:8080",
        ]
    vmap = ", ".join(f"{n} : goto {ep}" for n, ep in enumerate(endpoints))
    lines += [
        f"add chain {t} {svc}",
        f"flush chain {t} {svc}",
        f"add rule {t} {svc} ip daddr {vip(i)} tcp dport 80 ip saddr != 10.65.0.0/16"
        " jump mark-for-masquerade",
        f"add rule {t} {svc} numgen random mod {len(endpoints)} vmap {{ {vmap} }}",
    ]
    return lines


def kube_proxy(services: int, backends: int, changes: int) -> dict[str, float]:
    """kube-proxy's nftables layout: loaded by one nft -f, then ``changes``
    backend changes, each one nft -f (a new endpoint chain, the service
    chain rewritten, the old endpoint chain deleted)."""
    t = "ip kube-proxy"
    lines = [
        f"add table {t}",
        f"add map {t} service-ips {{ type ipv4_addr . inet_proto . inet_service : verdict; }}",
        f"add chain {t} nat-prerouting {{ type nat hook prerouting priority -100; }}",
        f"add chain {t} services",
        f"add rule {t} nat-prerouting jump services",
        f"add rule {t} services ip daddr . meta l4proto . th dport vmap @service-ips",
        f"add chain {t} mark-for-masquerade",
        f"add rule {t} mark-for-masquerade meta mark set meta mark | 0x4000",
    ]
    held = {i: [address(i * backends + j) for j in range(backends)] for i in range(services)}
    for i, members in held.items():
        lines += kube_proxy_chains(i, members)
        lines.append(
            f"add element {t} service-ips {{ {vip(i)} . tcp . 80 :"
            f" goto service-{i}-bench/svc-{i}/tcp/http }}"
        )
    begin = time.perf_counter()
    subprocess.run(["nft", "-f", "-"], input="\n".join(lines).encode(), check=True)
    load = time.perf_counter() - begin
    rng = random.Random(7)
    times = []
    for n in range(changes):
        i = rng.randrange(services)
        slot = rng.randrange(backends)
        old = held[i][slot]
        held[i][slot] = address(services * backends + n)
        script = kube_proxy_chains(i, held[i])
        script.append(f"delete chain {t} endpoint-{i}-bench/svc-{i}/tcp/http__{old}/8080")
        begin = time.perf_counter()
        subprocess.run(["nft", "-f", "-"], input="\n".join(script).encode(), check=True)
        times.append(time.perf_counter() - begin)
    subprocess.run(["nft", "delete", "table", "ip", "kube-proxy"], check=True)
    return {
        "kube-proxy load": load,
        "kube-proxy p50": statistics.median(times),
        "kube-proxy p99": percentile(times, 99),
    }


LISTEN = "10.200.0.1"  # on a veth of the namespace (no dummy module here): the probes' backend


def _connect_ns(target: tuple[str, int]) -> int:
    with socket.socket() as sock:
        begin = time.perf_counter_ns()
        sock.connect(target)
        return time.perf_counter_ns() - begin


async def connect_times(table: ServiceTable, services: int, rounds: int = 300) -> dict[str, float]:
    """TCP connect() to the first and the last service's VIP (both DNATed by
    the table to a listener here) and straight to the listener, shuffled."""
    for command in (
        "ip link set lo up",
        "ip link add dp-probe type veth peer name dp-probe-peer",
        f"ip addr add {LISTEN}/32 dev dp-probe",
        "ip link set dp-probe up",
        "ip link set dp-probe-peer up",
        "ip route add 10.96.0.0/12 dev dp-probe",
    ):
        subprocess.run(command.split(), check=True)
    probe = (BackendPort("http", "tcp", 8080),)
    for i in (0, services - 1):
        table.set_service(
            Service(
                ServiceKey("bench", f"svc-{i}"),
                cluster_ips=(vip(i),),
                ports=PORTS,
                backends=(Backend(LISTEN, probe, local=True),),
            )
        )
    await table.apply()
    server = socket.create_server((LISTEN, 8080), backlog=4096)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    targets = {"first": (vip(0), 80), "last": (vip(services - 1), 80), "direct": (LISTEN, 8080)}
    times: dict[str, list[int]] = {name: [] for name in targets}
    rng = random.Random(3)
    for _ in range(rounds):
        order = list(targets)
        rng.shuffle(order)
        for name in order:
            times[name].append(_connect_ns(targets[name]))
    server.close()
    return {f"connect {name}": statistics.median(t) / 1000 for name, t in times.items()}


async def refresh_times(table: ServiceTable) -> tuple[float, float]:
    """A refresh of the loaded table (every set dumped and compared, the
    rules by their comments), after one to warm up: its time, and the
    longest the trio loop went without running meanwhile (the gap between
    the wakes of a task asking to wake every millisecond)."""
    await table.refresh()
    gaps: list[float] = []
    done = trio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await trio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        begin = time.perf_counter()
        if await table.refresh():
            raise SystemExit("the refresh found differences in an untouched table")
        took = time.perf_counter() - begin
        done.set()
    return took, max(gaps, default=0.0)


async def measure(
    services: int, backends: int, changes: int, kube_proxy_max: int
) -> dict[str, float]:
    runner = ProcessRunner()
    layout = ServiceLayout(4, "bench-svc", MASQ)
    writer = ElementWriter()
    commits: list[float] = []

    def timed(changes: Iterable[ElementChange]) -> None:
        writer(changes)
        commits.append(time.perf_counter())

    table = ServiceTable(layout, runner, timed, TableReader())
    table.set_pools(["10.65.0.0/16"])
    state = {i: service(i, i * backends, backends) for i in range(services)}
    started = time.perf_counter()
    for s in state.values():
        table.set_service(s)
    await table.apply()
    programmed = time.perf_counter() - started
    rng = random.Random(7)
    in_force, applied = [], []
    fresh = services * backends
    for n in range(changes):
        i = rng.randrange(services)
        old = state[i]
        slot = rng.randrange(backends)
        members = list(old.backends)
        members[slot] = Backend(address(fresh + n), TO)
        state[i] = Service(
            old.key, cluster_ips=old.cluster_ips, ports=PORTS, backends=tuple(members)
        )
        commits.clear()
        begin = time.perf_counter()
        table.set_service(state[i])
        await table.apply()
        applied.append(time.perf_counter() - begin)
        in_force.append(commits[0] - begin)
    HeapFreezer(time.monotonic).after_apply()  # as the driver does after an apply
    read_back, held = await refresh_times(table)
    connect = await connect_times(table, services)
    # The driver's own: before the floor's script text below is built.
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if table.structure_writes != 1:
        raise SystemExit(f"a backend change ran nft ({table.structure_writes} structure writes)")
    await table.cleanup()

    kube = kube_proxy(services, backends, 20) if services <= kube_proxy_max else {}
    floor_table = ServiceLayout(4, "bench-floor", MASQ)
    script = floor_script(floor_table, services, backends)
    begin = time.perf_counter()
    subprocess.run(["nft", "-f", "-"], input=script.encode(), check=True)
    floor = time.perf_counter() - begin
    subprocess.run(["nft", "delete", "table", "ip", floor_table.table], check=True)
    return {
        "programmed": programmed,
        "floor": floor,
        "p50": statistics.median(in_force),
        "p99": percentile(in_force, 99),
        "apply p50": statistics.median(applied),
        "apply p99": percentile(applied, 99),
        "rss": rss,
        "refresh": read_back,
        "refresh held": held,
        **connect,
        **kube,
    }


HEADER = [
    "services",
    "programmed",
    "floor (one nft -f)",
    "ratio",
    "backend change in force p50 / p99",
    "apply returns p50 / p99",
    "peak RSS",
    "refresh: read back / loop held",
    "connect p50: first VIP / last VIP / direct",
    "kube-proxy's nft layout: load, change p50 / p99",
]


def inside(args: argparse.Namespace) -> None:
    """One size, one row of the table (a process of its own: its own peak RSS)."""
    size = int(args.sizes)
    r = trio.run(measure, size, args.backends, args.changes, args.kube_proxy_max)
    row = [
        f"{size:,} x {args.backends}",
        f"{r['programmed']:.2f} s",
        f"{r['floor']:.2f} s",
        f"{r['programmed'] / r['floor']:.2f}",
        f"{r['p50'] * 1000:.2f} / {r['p99'] * 1000:.2f} ms",
        f"{r['apply p50'] * 1000:.1f} / {r['apply p99'] * 1000:.1f} ms",
        f"{r['rss']:.0f} MB",
        f"{r['refresh']:.2f} s / {r['refresh held'] * 1000:.1f} ms",
        f"{r['connect first']:.0f} / {r['connect last']:.0f} / {r['connect direct']:.0f} µs",
        (
            f"{r['kube-proxy load']:.2f} s, {r['kube-proxy p50'] * 1000:.0f} /"
            f" {r['kube-proxy p99'] * 1000:.0f} ms"
            if "kube-proxy load" in r
            else "not run (--kube-proxy-max)"
        ),
    ]
    print("| " + " | ".join(row) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,20000")
    parser.add_argument("--backends", type=int, default=10)
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument(
        "--kube-proxy-max",
        type=int,
        default=5000,
        help="run kube-proxy's layout up to this many services (it loads in quadratic time)",
    )
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args)
        return
    print(machine())
    print()
    print(markdown_table(HEADER, []), flush=True)
    for size in args.sizes.split(","):
        run_inside_netns(
            __file__,
            [
                *("--sizes", size, "--backends", str(args.backends)),
                *("--changes", str(args.changes), "--kube-proxy-max", str(args.kube_proxy_max)),
            ],
            "nftsvc",
        )


if __name__ == "__main__":
    main()
