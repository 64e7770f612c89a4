"""The Linux platform on the real kernel: a generated node, each backend.

For each backend (iptables legacy, iptables nft, native nftables) in a
fresh network namespace of its own:

1. **programmed**: time from feeding the node's whole message stream
   (decoding the framed log as the pipe would, then ``send_message`` of
   every envelope, ending with InSync) until ``DataplaneInSync`` comes out,
   i.e. the first apply is done: IP sets, iptables (raw, mangle, nat,
   filter; v4 and v6), routes, interface sysctls.
2. **floor**: the state programmed in 1 (dumped with ``ipset save``,
   ``iptables-save``, ``ip6tables-save`` and the routes with our protocol
   number) loaded into a second fresh namespace holding the same interfaces
   with the plain tools: ``ipset restore``, ``iptables-restore``,
   ``ip6tables-restore`` (on nftables: our tables listed and loaded with
   one ``nft -f``) and ``ip -batch`` for the routes. The floor
   includes the routes; it does not include the per-interface sysctls the
   driver also writes (their cost is in the stage breakdown).
3. **ratio** programmed / floor.
4. **add one endpoint**: latency p50/p99 over ``--additions`` additions to
   the loaded node, each one ``WorkloadEndpointUpdate`` for a spare
   interface that already exists, measured until that endpoint's
   ``WorkloadEndpointStatusUpdate`` comes out (statuses are sent after each
   successful apply). The additions alternate: a replica of a loaded
   endpoint (its namespace and policies, as a Deployment scaled up), then
   one with a policy combination of its own; each kind has its figures
   (on nftables a replica writes only elements).
5. **peak RSS** of the driver process after the load (``ru_maxrss``).

Interfaces: one veth pair per endpoint (the kernel may lack the dummy
driver). The host side ("cali" + 11 hex digits) is in the node namespace;
the peer goes to a namespace of its own, as a pod's eth0 would, so the
driver sees one link per endpoint as on a real node. ``--peers-in-node``
leaves the peers in the node namespace too (twice the links).

The stage breakdown comes from timing wrappers put around the
programmers' entry points in the child process (the product code is not
changed); ``--profile`` adds cProfile listings (main thread and the worker
threads that run netlink and sysctl work) of the initial programming and
of the additions.

The messages are built in this (parent) process and written as framed
logs; the measurement runs in a child process started with
``ip netns exec NS`` so that the platform's default command runner and
netlink handle program that namespace, and its RSS is the driver's, not
the generator's (``benchmarks/_runs.py``). The namespaces come from
``testbed.topology`` and are deleted at the end, also on error, Ctrl-C or
SIGTERM.

Needs root, ``ip``, ``ipset``, ``iptables-legacy*`` and ``iptables-nft*``.

Usage: python benchmarks/bench_linux.py [--quick] [--endpoints N] [--policies N]
       [--sets N] [--members N] [--additions N] [--backends legacy,nft,nftables]
       [--peers-in-node] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import logging
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _floor
from benchmarks._common import machine, markdown_table, percentile
from benchmarks._node import (
    REPLICA,
    ROUTE_PROTOCOL,
    NodeBuilder,
    Sizes,
    add_size_arguments,
    veth_node,
)
from benchmarks._runs import (
    ELEMENT_TRANSACTIONS,
    STAGES,
    GCTimes,
    ThreadProfiles,
    apply_quick,
    feed,
    instrument_linux,
    load_figures,
    profile_text,
    require_root,
    run_child,
    stage_rows,
)
from dataplane.core.heap import HeapFreezer
from dataplane.core.loop import Dataplane
from dataplane.linux.platform import LinuxPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import FrameDecoder
from dataplane.wire.msglog import build_log
from testbed.topology import Topology, sigterm_unwinds

SCRIPT = Path(__file__).resolve()


# ---------------------------------------------------------------------------
# The measurement (child side, inside the node namespace).
# ---------------------------------------------------------------------------


def _key(wid: pb.WorkloadEndpointID) -> tuple[str, str, str]:
    return (wid.orchestrator_id, wid.workload_id, wid.endpoint_id)


async def _measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    data = (workdir / "node.log").read_bytes()
    additions = FrameDecoder().feed((workdir / "additions.log").read_bytes())
    threads = ThreadProfiles()
    if args.profile:
        threads.install()
    main_profile = cProfile.Profile()
    # As the driver runs it: the heap collected and frozen after applies.
    dp = Dataplane(LinuxPlatform(), heap=HeapFreezer(trio.current_time))
    result: dict[str, Any] = {"backend": args.backend, "log_bytes": len(data)}
    statuses: dict[tuple[str, str, str], str] = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(dp.run)
        await trio.sleep(0.05)  # let the loop start and wait for input
        if args.profile:
            threads.active = True
            main_profile.enable()
        GC.take()
        start, decoded = feed(dp, data)
        with trio.fail_after(args.timeout):
            while True:
                msg = await dp.recv_message()
                kind = msg.WhichOneof("payload")
                if kind == "workload_endpoint_status_update":
                    update = msg.workload_endpoint_status_update
                    statuses[_key(update.id)] = update.status.status
                elif kind == "dataplane_in_sync":
                    break
        done = time.perf_counter()
        result["gc_first"] = GC.take()
        if args.profile:
            main_profile.disable()
            threads.active = False
        result |= load_figures(dp, start, decoded, done)
        result["endpoints_up"] = sum(1 for s in statuses.values() if s == "up")
        result["rss_kb_after_load"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        STAGES.clear()

        dump_start = time.perf_counter()
        result["dump"] = _floor.save(args.backend, workdir, ROUTE_PROTOCOL)
        result["dump_s"] = time.perf_counter() - dump_start

        if args.profile:
            print(
                profile_text(f"{args.backend}: initial programming, main thread", main_profile, 40)
            )
            print(
                profile_text(
                    f"{args.backend}: initial programming, worker threads", threads.profile, 20
                )
            )
            main_profile = cProfile.Profile()
            threads.profile = cProfile.Profile()
            threads.active = True
            main_profile.enable()

        # Adding one endpoint at a time to the loaded node.
        rng = random.Random(3)
        applies_before = dp.stats.applies
        latencies = []
        replicas: list[str] = []
        # Each addition's stages: what each wrapped step took between its
        # send and its status (summed over the applies in that window).
        per_addition: list[dict[str, float]] = []
        for envelope in additions:
            await trio.sleep(rng.uniform(0.0, 0.05))  # spread additions out in time
            want = _key(envelope.workload_endpoint_update.id)
            marks = {label: len(times) for label, times in STAGES.items()}
            sent = time.perf_counter()
            dp.send_message(envelope)
            with trio.fail_after(args.timeout):
                while True:
                    msg = await dp.recv_message()
                    if msg.WhichOneof("payload") != "workload_endpoint_status_update":
                        continue
                    if _key(msg.workload_endpoint_status_update.id) == want:
                        break
            latencies.append(time.perf_counter() - sent)
            replicas.append(envelope.workload_endpoint_update.id.workload_id.split("/")[1])
            stages = {label: sum(times[marks.get(label, 0) :]) for label, times in STAGES.items()}
            stages.pop("apply: total", None)  # ends after the status is out: not in this window
            steps = sum(t for label, t in stages.items() if label != ELEMENT_TRANSACTIONS)
            stages["the rest (the loop, statuses, waits)"] = latencies[-1] - steps
            per_addition.append({label: t for label, t in stages.items() if t})
        result["latencies_s"] = latencies
        for kind, is_replica in (("replica", True), ("new", False)):
            result[f"{kind}_latencies_s"] = [
                t
                for t, name in zip(latencies, replicas, strict=True)
                if name.startswith(REPLICA) is is_replica
            ]
            result[f"{kind}_stages"] = [
                stages
                for stages, name in zip(per_addition, replicas, strict=True)
                if name.startswith(REPLICA) is is_replica
            ]
        result["latency_applies"] = dp.stats.applies - applies_before
        result["apply_failures_total"] = dp.stats.apply_failures
        result["gc_additions"] = GC.take()
        if args.profile:
            main_profile.disable()
            threads.active = False
            title = f"{args.backend}: {len(additions)} additions"
            print(profile_text(f"{title}, main thread", main_profile, 30))
            print(profile_text(f"{title}, worker threads", threads.profile, 20))
        dp.close_input()
    result["rss_kb_end"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return result


GC = GCTimes()


def child_measure(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING, format="  [driver] %(levelname)s %(message)s")
    instrument_linux()
    gc.callbacks.append(GC.callback)
    workdir = Path(args.workdir)
    result = trio.run(_measure, args, workdir)
    (workdir / "result.json").write_text(json.dumps(result))


def child_floor(args: argparse.Namespace) -> None:
    """Load the saved state with the plain tools (inside a fresh namespace)."""
    workdir = Path(args.workdir)
    (workdir / "floor.json").write_text(json.dumps(_floor.load(args.backend, workdir)))


# ---------------------------------------------------------------------------
# Orchestration and report (parent side).
# ---------------------------------------------------------------------------


def run_backend(
    topo: Topology,
    backend: str,
    sizes: Sizes,
    logs: tuple[bytes, bytes],
    args: argparse.Namespace,
) -> dict[str, Any]:
    links = sizes.endpoints + sizes.spare
    with tempfile.TemporaryDirectory(prefix=f"bench-linux-{backend}-") as tmp:
        workdir = Path(tmp)
        (workdir / "node.log").write_bytes(logs[0])
        (workdir / "additions.log").write_bytes(logs[1])
        with veth_node(topo, "nod", links, args.peer_netns) as (node, setup_s):
            where = "a namespace of their own" if args.peer_netns else "the node namespace"
            print(
                f"[{backend}] {node}: {links} veth pairs (peers in {where}) in {setup_s:.2f} s",
                flush=True,
            )
            child = ["--child", "measure", "--backend", backend, "--workdir", tmp]
            child += ["--timeout", str(args.timeout)] + (["--profile"] if args.profile else [])
            run_child(node, SCRIPT, child, timeout=args.timeout * 3)
        result: dict[str, Any] = json.loads((workdir / "result.json").read_text())
        result["link_setup_s"] = setup_s
        # The floor namespace holds the same interfaces: the routes need them.
        with veth_node(topo, "flr", links, args.peer_netns) as (floor_ns, _):
            child = ["--child", "floor", "--backend", backend, "--workdir", tmp]
            run_child(floor_ns, SCRIPT, child, timeout=args.timeout)
        result.update(json.loads((workdir / "floor.json").read_text()))
    return result


def _summary_row(r: dict[str, Any]) -> list[str]:
    floor = r["floor"]
    floor_total = sum(floor.values())
    replica = [x * 1000 for x in r["replica_latencies_s"]]
    new = [x * 1000 for x in r["new_latencies_s"]]
    if "nft" in floor:
        parts = f"{floor['nft']:.2f} nft -f + {floor['routes']:.2f} routes"
    else:
        parts = (
            f"{floor['ipset']:.2f} ipset + {floor['iptables'] + floor['ip6tables']:.2f}"
            f" iptables + {floor['routes']:.2f} routes"
        )
    return [
        r["backend"],
        f"{r['programmed_s']:.2f} s",
        f"{floor_total:.2f} s ({parts})",
        f"{r['programmed_s'] / floor_total:.1f}x",
        *(
            f"{percentile(part, 50):.0f} / {percentile(part, 99):.0f} ms" if part else "-"
            for part in (replica, new)
        ),
        f"{r['rss_kb_after_load'] / 1024:.0f} MB",
    ]


def _gc(stats: dict[str, Any]) -> str:
    return (
        f"{stats['seconds']:.2f} s ({stats['gen2']} full collections,"
        f" longest pause {stats['longest_s'] * 1000:.0f} ms)"
    )


def report(results: list[dict[str, Any]], sizes: Sizes, elapsed: float) -> None:
    first = results[0]["dump"]
    print()
    print(
        f"Node: {sizes.endpoints:,} workload endpoints (veth, IPv4 /32 + IPv6 /128 each), "
        f"{sizes.policies} policies x 10 rules in 2 tiers, {sizes.sets} IP sets with "
        f"{sizes.members:,} members (→ {first['sets']} kernel sets, {first['members']:,} "
        f"entries), {first['rules_v4']:,} + {first['rules_v6']:,} iptables rules (v4 + v6), "
        f"{first['routes']:,} routes."
    )
    print(f"Machine: {machine()}")
    print()
    header = [
        "backend",
        "programmed (all messages → DataplaneInSync)",
        "floor (ipset + iptables/ip6tables-restore, or nft -f; + ip -batch routes)",
        "programmed / floor",
        f"add one endpoint p50 / p99, a replica ({len(results[0]['replica_latencies_s'])})",
        "add one endpoint p50 / p99, a new policy combination",
        "peak RSS after load",
    ]
    print(markdown_table(header, [_summary_row(r) for r in results]))
    print()
    print("Stage breakdown of the initial programming (seconds; phase 2 = one apply):")
    rows = stage_rows(results)
    print(markdown_table(["stage", *(r["backend"] for r in results)], rows))
    print()
    print(
        "Adding one endpoint, by kind: each step's median per addition, ms (its steps in"
        " the applies between the send and the status; the rest: from the send to the"
        " status outside them):"
    )
    columns = [(r, kind) for r in results for kind in ("replica", "new")]
    labels = {k: None for r, kind in columns for stages in r[f"{kind}_stages"] for k in stages}

    def cell(r: dict[str, Any], kind: str, label: str) -> str:
        values = [stages.get(label, 0.0) * 1000 for stages in r[f"{kind}_stages"]]
        if not any(values):
            return "-"
        return f"{statistics.median(values):.1f} (max {max(values):.0f})"

    rows = [[label, *(cell(r, kind, label) for r, kind in columns)] for label in sorted(labels)]
    rows.append(["applies during the additions", *(str(r["latency_applies"]) for r, _ in columns)])
    kinds = {"replica": "a replica", "new": "a new combination"}
    print(markdown_table(["stage", *(f"{r['backend']}, {kinds[k]}" for r, k in columns)], rows))
    print()
    for r in results:
        lat = sorted(x * 1000 for x in r["latencies_s"]) or [float("nan")]
        print(
            f"[{r['backend']}] endpoints up at in-sync {r['endpoints_up']}/{sizes.endpoints}; "
            f"applies to in-sync {r['applies_to_in_sync']} (failures {r['apply_failures']}, "
            f"total {r['apply_failures_total']}); rejected messages {r['rejected']}; "
            f"log {r['log_bytes'] / 1e6:.1f} MB; dump {r['dump_s']:.2f} s; "
            f"floor check {r['check']}; latency ms min {lat[0]:.0f} max {lat[-1]:.0f}; "
            f"RSS at end {r['rss_kb_end'] / 1024:.0f} MB; veth setup {r['link_setup_s']:.2f} s; "
            f"GC during load {_gc(r['gc_first'])}, during additions {_gc(r['gc_additions'])}"
        )
    print(f"\nwhole run: {elapsed:.1f} s")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_size_arguments(parser)
    parser.add_argument(
        "--additions", type=int, default=50, help="endpoints added after the load (quick: 20)"
    )
    parser.add_argument(
        "--peers-in-node",
        dest="peer_netns",
        action="store_false",
        help="leave each veth's peer in the node namespace too (twice the links the driver"
        " lists on every apply) instead of in a namespace of their own, as on a real node",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="100 endpoints, 20 policies, 50 sets, 10,000 members (unless given)",
    )
    parser.add_argument("--backends", default="legacy,nft,nftables")
    parser.add_argument("--profile", action="store_true", help="cProfile the initial programming")
    parser.add_argument("--timeout", type=float, default=600, help="per step, seconds")
    parser.add_argument("--child", choices=["measure", "floor"], help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    apply_quick(
        args, {"endpoints": 100, "policies": 20, "sets": 50, "members": 10_000, "additions": 20}
    )
    return args


def main() -> None:
    args = parse_args()
    if args.child == "measure":
        child_measure(args)
        return
    if args.child == "floor":
        child_floor(args)
        return
    require_root()
    sizes = Sizes(args.endpoints, args.policies, args.sets, args.members, args.additions)
    start = time.perf_counter()
    results = []
    with sigterm_unwinds(), Topology() as topo:
        for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
            built = time.perf_counter()
            builder = NodeBuilder(sizes, backend)
            snapshot = build_log(builder.snapshot())
            logs = (snapshot, build_log(builder.additions(replicas=True), first_seq=10**6))
            print(
                f"[{backend}] generated the node's messages in {time.perf_counter() - built:.2f} s",
                flush=True,
            )
            results.append(run_backend(topo, backend, sizes, logs, args))
    report(results, sizes, time.perf_counter() - start)


if __name__ == "__main__":
    main()
