"""The VXLAN overlay on the real kernel: 500 remote nodes, 2,000 remote blocks (issue 12).

The node (``node-0000``) has an uplink veth holding its VTEP parent address
172.16.0.1/16; both ends of the veth stay in the node namespace. Felix's
stream for it: ConfigUpdate (FelixHostname, IPv4 only), Encapsulation
(VXLAN on), the IP pool 10.64.0.0/10 (vxlan_mode Always, with Felix's
CIDR_INFO route for it), one HostMetadataUpdate and one
VXLANTunnelEndpointUpdate per node (ours and ``--remote-nodes`` others),
per remote node its tunnel address route (/32, REMOTE_WORKLOAD |
REMOTE_TUNNEL) and ``--blocks-per-node`` block routes (/26,
REMOTE_WORKLOAD), our own block (LOCAL_WORKLOAD), then InSync. The other
nodes' parent addresses are in our /16 but exist nowhere: FDB entries and
onlink routes do not need them to answer.

What the kernel must hold afterwards (checked exactly, entry by entry,
after every measurement; a mismatch fails the run): ``vxlan.calico`` with
our tunnel address; per remote node a permanent neighbour (tunnel address
-> VTEP MAC), a bridge FDB entry (VTEP MAC -> parent address, ``self
permanent``), a ``dev vxlan.calico`` route to its tunnel address and one
``via <its tunnel address> dev vxlan.calico onlink`` route per block; a
blackhole for our own block. All routes carry protocol 80.

1. **programmed**: from feeding the whole stream (decoding the framed log
   as the pipe would, then ``send_message`` of every envelope, ending with
   InSync) until ``DataplaneInSync`` comes out, i.e. the first apply is
   done. That apply also writes what the overlay needs besides: the IP
   sets ``all-vxlan-net`` and ``all-hosts-net`` and every iptables table
   (v4); the stage breakdown shows each part.
2. **floor**: the same kernel state made with the plain tools in a fresh
   namespace with the same uplink: the device with one ``ip -batch`` (``link
   add ... type vxlan``, its address, up), then the neighbours and routes
   with one ``ip -batch`` and the FDB entries with one ``bridge -batch``.
   The floor is the sum of the three and includes the device; each part is
   also shown. It has no IP sets and no iptables.
3. **ratio** programmed / floor, beside the goal (<= 1.5x). Also the
   driver's overlay stages alone (VXLAN programmer + route programmer)
   against the floor's.
4. **one VTEP added**: latency p50/p99 over ``--additions`` new nodes
   joining the loaded node, each sent at once as its HostMetadataUpdate,
   VXLANTunnelEndpointUpdate, tunnel address route and one block route.
   Latency runs from sending to the end of the first apply after which the
   kernel holds the node's neighbour, FDB entry, tunnel route and block
   route: the check runs right as each apply returns (a wrapper around the
   loop's apply), before the loop can start anything else, so what it sees
   is what that apply left, and its own cost is not counted.

``--runs`` repeats 1 and 2 (each in fresh namespaces; the additions only
in the first run); the summary shows medians and the spread.

The messages are built in this (parent) process and written as framed
logs; the measurement runs in a child process started with ``ip netns exec
NS`` so that the platform's command runner and netlink handles program
that namespace (``benchmarks/_runs.py``). The namespaces come from
``testbed.topology`` and are deleted at the end, also on error, Ctrl-C or
SIGTERM. ``--profile`` adds cProfile listings (main thread and the worker
threads that run the netlink work) of the initial programming and of the
additions.

Needs root, ``ip`` and ``bridge`` (iproute2), ``ipset`` and the iptables
backend given.

Usage: python benchmarks/bench_overlay.py [--quick] [--remote-nodes N]
       [--blocks-per-node N] [--additions N] [--runs N] [--backend legacy|nft]
       [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import errno
import gc
import ipaddress
import json
import logging
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import trio
from google.protobuf.message import Message

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine, markdown_table, percentile, timed_tool
from benchmarks._node import ROUTE_PROTOCOL
from benchmarks._runs import (
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
from dataplane.core.loop import Dataplane
from dataplane.linux.ipsets.names import main_name
from dataplane.linux.netlink.overlay_plan import VXLAN_SOURCES_SET
from dataplane.linux.platform import LinuxPlatform
from dataplane.model import IPSetType
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import FrameDecoder
from dataplane.wire.msglog import build_log
from testbed.topology import Topology, sigterm_unwinds

SCRIPT = Path(__file__).resolve()

DEVICE = "vxlan.calico"
UPLINK = "eth0"
POOL = ipaddress.IPv4Network("10.64.0.0/10")
PARENT_NET = ipaddress.IPv4Network("172.16.0.0/16")
BLOCK_LEN = 26
VNI, PORT = 4096, 4789  # the driver's defaults (Felix's)
VXLAN_MTU = 1500 - 50  # a veth's MTU less the VXLAN overhead, as the driver sets it
LOCAL = 0  # node index of the node under test
# The kernel name of the set of addresses that may send us VXLAN (every
# other node's parent): INPUT drops VXLAN from anyone else, so a node is not
# reachable through the overlay before its parent is in it.
VXLAN_SOURCES = main_name(VXLAN_SOURCES_SET, 4, IPSetType.NET)
# What the kernel checks compare; the floor makes no IP sets.
KINDS = ("routes", "neighbours", "fdb", "vxlan_sources")


# ---------------------------------------------------------------------------
# The generated cluster (parent side).
# ---------------------------------------------------------------------------


class Cluster:
    """Node ``i``: addresses, MAC and blocks, all derived from ``i`` (no randomness)."""

    def __init__(self, remote_nodes: int, blocks_per_node: int, additions: int) -> None:
        self.remote = remote_nodes
        self.blocks = blocks_per_node
        self.additions = additions
        last = remote_nodes + additions
        if (last + 1) * blocks_per_node > POOL.num_addresses >> (32 - BLOCK_LEN):
            raise SystemExit(f"{last + 1} nodes x {blocks_per_node} blocks do not fit in {POOL}")
        if last + 2 >= PARENT_NET.num_addresses:
            raise SystemExit(f"{last + 1} nodes do not fit in {PARENT_NET}")

    @staticmethod
    def name(i: int) -> str:
        return f"node-{i:04d}"

    @staticmethod
    def parent(i: int) -> str:
        return str(PARENT_NET.network_address + 1 + i)

    @staticmethod
    def mac(i: int) -> str:
        # 0x66: locally administered, unicast.
        return "66:00:00:" + ":".join(f"{(i >> s) & 255:02x}" for s in (16, 8, 0))

    def block(self, i: int, j: int) -> str:
        size = 1 << (32 - BLOCK_LEN)
        start = POOL.network_address + (i * self.blocks + j) * size
        return f"{start}/{BLOCK_LEN}"

    def tunnel(self, i: int) -> str:
        """The tunnel address: the first host address of the node's first block."""
        return str(ipaddress.IPv4Network(self.block(i, 0)).network_address + 1)

    # -- messages ------------------------------------------------------------------

    def _vtep(self, i: int) -> Message:
        return pb.VXLANTunnelEndpointUpdate(
            node=self.name(i),
            mac=self.mac(i),
            ipv4_addr=self.tunnel(i),
            parent_device_ip=self.parent(i),
        )

    def _host(self, i: int) -> Message:
        return pb.HostMetadataUpdate(hostname=self.name(i), ipv4_addr=self.parent(i))

    def _route(self, dst: str, i: int, types: int) -> Message:
        return pb.RouteUpdate(
            types=types,  # type: ignore[arg-type]  # a bitmap, though declared an enum
            ip_pool_type=pb.VXLAN,
            dst=dst,
            dst_node_name=self.name(i),
            dst_node_ip=self.parent(i),
            nat_outgoing=True,
            tunnel_type=pb.TunnelType(vxlan=True),
        )

    def _node(self, i: int, blocks: int) -> list[Message]:
        """What Felix sends about a remote node: host, VTEP, tunnel route, block routes."""
        out = [self._host(i), self._vtep(i)]
        out.append(self._route(f"{self.tunnel(i)}/32", i, pb.REMOTE_WORKLOAD | pb.REMOTE_TUNNEL))
        out += [self._route(self.block(i, j), i, pb.REMOTE_WORKLOAD) for j in range(blocks)]
        return out

    def snapshot(self, backend: str) -> list[Message]:
        msgs: list[Message] = [
            pb.ConfigUpdate(
                config={
                    "IptablesBackend": backend,
                    "Ipv6Support": "false",
                    "InterfacePrefix": "cali",
                    "ChainInsertMode": "insert",
                    "FelixHostname": self.name(LOCAL),
                    "DefaultEndpointToHostAction": "ACCEPT",
                    "LogSeverityScreen": "Warning",
                }
            ),
            pb.Encapsulation(vxlan_enabled=True),
            pb.IPAMPoolUpdate(
                id="10-64-0-0-10",
                pool=pb.IPAMPool(cidr=str(POOL), masquerade=True, vxlan_mode="Always"),
            ),
            pb.RouteUpdate(
                types=pb.CIDR_INFO, ip_pool_type=pb.VXLAN, dst=str(POOL), nat_outgoing=True
            ),
            self._host(LOCAL),
            self._vtep(LOCAL),
            pb.RouteUpdate(
                types=pb.LOCAL_WORKLOAD,
                ip_pool_type=pb.VXLAN,
                dst=self.block(LOCAL, 0),
                dst_node_name=self.name(LOCAL),
                dst_node_ip=self.parent(LOCAL),
                nat_outgoing=True,
            ),
        ]
        for i in range(1, self.remote + 1):
            msgs += self._node(i, self.blocks)
        msgs.append(pb.InSync())
        return msgs

    def added(self) -> list[int]:
        return list(range(self.remote + 1, self.remote + 1 + self.additions))

    def additions_log(self) -> list[Message]:
        """Each added node's messages back to back; the child splits them by node."""
        return [m for i in self.added() for m in self._node(i, 1)]

    # -- the state the kernel must hold --------------------------------------------------

    def expected(self, nodes: list[int], added: list[int]) -> dict[str, Any]:
        routes = [[self.block(LOCAL, 0), "blackhole", ""]]
        for i in nodes:
            routes.append([f"{self.tunnel(i)}/32", "dev", ""])
            blocks = self.blocks if i not in added else 1
            routes += [[self.block(i, j), "onlink", self.tunnel(i)] for j in range(blocks)]
        return {
            "routes": sorted(routes),
            "neighbours": sorted([self.tunnel(i), self.mac(i)] for i in nodes),
            "fdb": sorted([self.mac(i), self.parent(i)] for i in nodes),
            "vxlan_sources": sorted([self.parent(i)] for i in nodes),
        }

    def added_entries(self) -> list[dict[str, str]]:
        """Per added node what the latency probe looks for."""
        return [
            {
                "tunnel": self.tunnel(i),
                "mac": self.mac(i),
                "parent": self.parent(i),
                "block_address": str(ipaddress.IPv4Network(self.block(i, 0)).network_address + 5),
            }
            for i in self.added()
        ]

    # -- the floor's batches ---------------------------------------------------------------

    def floor_batches(self) -> dict[str, str]:
        local = LOCAL
        device = [
            f"link add {DEVICE} address {self.mac(local)} mtu {VXLAN_MTU} type vxlan id {VNI}"
            f" dstport {PORT} dev {UPLINK} local {self.parent(local)} nolearning",
            f"addr add {self.tunnel(local)}/32 dev {DEVICE}",
            f"link set {DEVICE} up",
        ]
        proto = f"proto {ROUTE_PROTOCOL}"
        entries = [
            f"neigh add {self.tunnel(i)} lladdr {self.mac(i)} dev {DEVICE} nud permanent"
            for i in range(1, self.remote + 1)
        ]
        entries.append(f"route add blackhole {self.block(local, 0)} {proto}")
        for i in range(1, self.remote + 1):
            entries.append(f"route add {self.tunnel(i)}/32 dev {DEVICE} {proto} scope link")
            entries += [
                f"route add {self.block(i, j)} via {self.tunnel(i)} dev {DEVICE} onlink {proto}"
                for j in range(self.blocks)
            ]
        fdb = [
            f"fdb add {self.mac(i)} dev {DEVICE} dst {self.parent(i)} self permanent"
            for i in range(1, self.remote + 1)
        ]
        return {
            name: "".join(f"{line}\n" for line in lines)
            for name, lines in (("device", device), ("entries", entries), ("fdb", fdb))
        }


@contextlib.contextmanager
def uplink_node(topo: Topology, role: str) -> Iterator[str]:
    """A fresh namespace with the uplink veth (both ends) holding our parent address."""
    netns = topo.new_netns(role)
    try:
        topo.add_veths(netns, [(UPLINK, f"{UPLINK}p")])
        address = f"{Cluster.parent(LOCAL)}/{PARENT_NET.prefixlen}"
        batch = f"link set lo up\naddr add {address} dev {UPLINK}\n"
        subprocess.run(
            ["ip", "-n", netns, "-batch", "-"],
            input=batch.encode(),
            capture_output=True,
            check=True,
        )
        yield netns
    finally:
        topo.delete_netns(netns)


# ---------------------------------------------------------------------------
# The kernel's state (child side, inside a namespace).
# ---------------------------------------------------------------------------


def _json(argv: list[str]) -> list[dict[str, Any]]:
    out = subprocess.run(argv, capture_output=True, check=True).stdout.decode()
    parsed: list[dict[str, Any]] = json.loads(out or "[]")
    return parsed


def kernel_state() -> dict[str, Any]:
    """Our routes, the device's permanent neighbours and FDB entries, and all-vxlan-net."""
    routes = []
    for r in _json(
        ["ip", "-j", "-4", "route", "show", "table", "main", "proto", str(ROUTE_PROTOCOL)]
    ):
        dst = r["dst"] if "/" in r["dst"] else f"{r['dst']}/32"
        if r.get("type") == "blackhole":
            routes.append([dst, "blackhole", ""])
        elif "onlink" in r.get("flags", []) and r.get("dev") == DEVICE:
            routes.append([dst, "onlink", r.get("gateway", "")])
        elif r.get("dev") == DEVICE and "gateway" not in r:
            routes.append([dst, "dev", ""])
        else:
            routes.append([dst, f"unexpected {r}", ""])
    neighbours = [
        [n["dst"], n.get("lladdr", "")]
        for n in _json(["ip", "-j", "-4", "neigh", "show", "dev", DEVICE, "nud", "permanent"])
    ]
    fdb = [
        [e["mac"], e["dst"]]
        for e in _json(["bridge", "-j", "fdb", "show", "dev", DEVICE])
        if "dst" in e and e.get("state") == "permanent"
    ]
    return {
        "routes": sorted(routes),
        "neighbours": sorted(neighbours),
        "fdb": sorted(fdb),
        "vxlan_sources": sorted([m] for m in _set_members(VXLAN_SOURCES)),
    }


def _set_members(name: str) -> list[str]:
    proc = subprocess.run(["ipset", "list", name], capture_output=True, check=False)
    if proc.returncode != 0:
        return []  # no such set
    _, _, members = proc.stdout.decode().partition("Members:\n")
    return [line.split()[0].removesuffix("/32") for line in members.splitlines() if line.strip()]


def check_state(
    expected: dict[str, Any], where: str, kinds: tuple[str, ...] = KINDS
) -> dict[str, int]:
    """Fail loudly unless the kernel holds exactly ``expected`` (of ``kinds``); the counts."""
    held = kernel_state()
    problems = []
    for kind in kinds:
        want = {tuple(x) for x in expected[kind]}
        have = {tuple(x) for x in held[kind]}
        if want != have:
            missing, extra = sorted(want - have), sorted(have - want)
            problems.append(
                f"{kind}: {len(have)} held, {len(want)} expected; missing {len(missing)}"
                f" {missing[:3]}, unexpected {len(extra)} {extra[:3]}"
            )
    if problems:
        raise SystemExit(
            f"{where}: the kernel does not hold the expected overlay:\n  " + "\n  ".join(problems)
        )
    return {kind: len(held[kind]) for kind in kinds}


class AddedProbe:
    """Whether the kernel holds one added node's entries: four netlink gets, one ipset test."""

    def __init__(self) -> None:
        from pyroute2 import IPRoute  # type: ignore[import-untyped]  # noqa: PLC0415

        self._ipr: Any = IPRoute()
        self._index: int = self._ipr.link_lookup(ifname=DEVICE)[0]

    def holds(self, want: dict[str, str]) -> bool:
        return not self.missing(want)

    def missing(self, want: dict[str, str]) -> list[str]:
        """What of the node the kernel lacks (empty: all there)."""
        # Lookups, not dumps: a dump of 2,500 routes decoded by pyroute2
        # would take longer than the apply being timed.
        out = []
        block = self._get("route", dst=want["block_address"])
        if not (block and block.get("RTA_GATEWAY") == want["tunnel"]):
            out.append("block route")
        tunnel = self._get("route", dst=want["tunnel"])
        if not (tunnel and tunnel.get("RTA_OIF") == self._index and not tunnel.get("RTA_GATEWAY")):
            out.append("tunnel route")
        neigh = self._get("neigh", dst=want["tunnel"], ifindex=self._index)
        if not (neigh and neigh.get("NDA_LLADDR") == want["mac"]):
            out.append("neighbour")
        fdb = self._get("fdb", lladdr=want["mac"], ifindex=self._index, flags=_NTF_SELF)
        if not (fdb and fdb.get("NDA_DST") == want["parent"]):
            out.append("fdb entry")
        member = ["ipset", "test", VXLAN_SOURCES, want["parent"]]
        if subprocess.run(member, capture_output=True, check=False).returncode != 0:
            out.append(VXLAN_SOURCES_SET)
        return out

    def _get(self, kind: str, **request: Any) -> Any:
        """One entry (a route: the lookup's result), or None when there is none."""
        try:
            return getattr(self._ipr, kind)("get", **request)[0]
        except OSError as exc:  # pyroute2's NetlinkError
            if getattr(exc, "code", None) in (errno.ENETUNREACH, errno.ENOENT, errno.EHOSTUNREACH):
                return None
            raise

    def close(self) -> None:
        self._ipr.close()


_NTF_SELF = 0x02


class ApplyEnds:
    """After every apply of the loop, the time it ended, and the probe's verdict then.

    The probe runs synchronously as the apply returns, before the loop can
    start another, so it sees exactly what that apply left.
    """

    def __init__(self) -> None:
        self.want: dict[str, str] | None = None
        self.probe: AddedProbe | None = None
        self.landed_at: float | None = None
        self.applies = 0
        self.probe_s: list[float] = []

    def install(self) -> None:
        original: Callable[[Dataplane], Awaitable[None]] = Dataplane._apply
        ends = self

        async def apply(dp: Dataplane) -> None:
            await original(dp)
            ended = time.perf_counter()
            ends.applies += 1
            if ends.want is not None and ends.probe is not None and ends.landed_at is None:
                if ends.probe.holds(ends.want):
                    ends.landed_at = ended
                ends.probe_s.append(time.perf_counter() - ended)

        setattr(Dataplane, "_apply", apply)  # noqa: B010  # as the stage wrappers do


# ---------------------------------------------------------------------------
# The measurement (child side, inside the node namespace).
# ---------------------------------------------------------------------------

GC = GCTimes()
ENDS = ApplyEnds()


async def _wait_in_sync(dp: Dataplane, timeout: float) -> None:
    with trio.fail_after(timeout):
        while True:
            msg = await dp.recv_message()
            if msg.WhichOneof("payload") == "dataplane_in_sync":
                return


def _per_node(envelopes: list[pb.ToDataplane]) -> list[list[pb.ToDataplane]]:
    """The additions log split into one group per node (each starts with its host)."""
    groups: list[list[pb.ToDataplane]] = []
    for envelope in envelopes:
        if envelope.WhichOneof("payload") == "host_metadata_update":
            groups.append([])
        groups[-1].append(envelope)
    return groups


async def _measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    data = (workdir / "node.log").read_bytes()
    expected = json.loads((workdir / "expected.json").read_text())
    additions = _per_node(FrameDecoder().feed((workdir / "additions.log").read_bytes()))
    additions = additions[: args.additions]
    wants: list[dict[str, str]] = json.loads((workdir / "added.json").read_text())
    threads = ThreadProfiles()
    if args.profile:
        threads.install()
    main_profile = cProfile.Profile()
    dp = Dataplane(LinuxPlatform())
    result: dict[str, Any] = {"log_bytes": len(data)}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(dp.run)
        await trio.sleep(0.05)  # let the loop start and wait for input
        if args.profile:
            threads.active = True
            main_profile.enable()
        GC.take()
        start, decoded = feed(dp, data)
        await _wait_in_sync(dp, args.timeout)
        done = time.perf_counter()
        if args.profile:
            main_profile.disable()
            threads.active = False
        result["gc_first"] = GC.take()
        result |= load_figures(dp, start, decoded, done)
        result["rss_kb_after_load"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # No await since DataplaneInSync: the kernel is as the first apply left it.
        result["counts"] = check_state(expected["load"], "at DataplaneInSync")
        if dp.stats.rejected or dp.stats.apply_failures:
            raise SystemExit(
                f"{dp.stats.rejected} messages rejected, {dp.stats.apply_failures} applies failed"
            )
        STAGES.clear()

        if args.profile:
            print(profile_text("initial programming, main thread", main_profile, 40))
            print(profile_text("initial programming, worker threads", threads.profile, 20))
            main_profile = cProfile.Profile()
            threads.profile = cProfile.Profile()

        # One node joining at a time: let the load's follow-up applies (the
        # new device's link notification) pass first.
        await trio.sleep(0.5)
        STAGES.clear()
        ENDS.probe = AddedProbe() if additions else None
        if args.profile and additions:
            threads.active = True
            main_profile.enable()
        rng = random.Random(3)
        latencies: list[float] = []
        applies_each: list[int] = []
        for group, want in zip(additions, wants, strict=False):
            await trio.sleep(rng.uniform(0.0, 0.05))  # spread additions out in time
            ENDS.want, ENDS.landed_at = want, None
            applies_before = ENDS.applies
            sent = time.perf_counter()
            for envelope in group:
                dp.send_message(envelope)
            with trio.move_on_after(args.timeout):
                while ENDS.landed_at is None:
                    await trio.sleep(0.001)
            if ENDS.landed_at is None:
                lacking = ENDS.probe.missing(want) if ENDS.probe else []
                raise SystemExit(f"{want} not programmed after {args.timeout} s: lacks {lacking}")
            latencies.append(ENDS.landed_at - sent)
            applies_each.append(ENDS.applies - applies_before)
        ENDS.want = None
        if args.profile and additions:
            main_profile.disable()
            threads.active = False
            title = f"{len(additions)} VTEP additions"
            print(profile_text(f"{title}, main thread", main_profile, 30))
            print(profile_text(f"{title}, worker threads", threads.profile, 20))
        result["latencies_s"] = latencies
        result["applies_per_addition"] = applies_each
        result["probe_s"] = ENDS.probe_s
        result["latency_stages"] = {k: list(v) for k, v in STAGES.items()}
        result["gc_additions"] = GC.take()
        if ENDS.probe is not None:
            ENDS.probe.close()
            result["counts_end"] = check_state(expected["end"], "after the additions")
        result["apply_failures_total"] = dp.stats.apply_failures
        dp.close_input()
    result["rss_kb_end"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return result


def child_measure(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING, format="  [driver] %(levelname)s %(message)s")
    instrument_linux()
    ENDS.install()
    gc.callbacks.append(GC.callback)
    workdir = Path(args.workdir)
    result = trio.run(_measure, args, workdir)
    (workdir / "result.json").write_text(json.dumps(result))


def child_floor(args: argparse.Namespace) -> None:
    """The same state with the plain tools, in a fresh namespace with the same uplink."""
    workdir = Path(args.workdir)
    present = subprocess.run(["ip", "link", "show", DEVICE], capture_output=True, check=False)
    if present.returncode == 0:
        raise SystemExit(f"floor namespace is not fresh: {DEVICE} exists")
    floor = {
        "device": timed_tool(["ip", "-batch", "-"], workdir / "device.batch"),
        "neigh+routes": timed_tool(["ip", "-batch", "-"], workdir / "entries.batch"),
        "fdb": timed_tool(["bridge", "-batch", "-"], workdir / "fdb.batch"),
    }
    expected = json.loads((workdir / "expected.json").read_text())
    counts = check_state(expected["load"], "floor", ("routes", "neighbours", "fdb"))
    (workdir / "floor.json").write_text(json.dumps({"floor": floor, "floor_counts": counts}))


# ---------------------------------------------------------------------------
# Orchestration and report (parent side).
# ---------------------------------------------------------------------------


def write_inputs(workdir: Path, cluster: Cluster, backend: str) -> None:
    (workdir / "node.log").write_bytes(build_log(cluster.snapshot(backend)))
    (workdir / "additions.log").write_bytes(build_log(cluster.additions_log(), first_seq=10**6))
    remote = list(range(1, cluster.remote + 1))
    added = cluster.added()
    expected = {
        "load": cluster.expected(remote, []),
        "end": cluster.expected(remote + added, added),
    }
    (workdir / "expected.json").write_text(json.dumps(expected))
    (workdir / "added.json").write_text(json.dumps(cluster.added_entries()))
    for name, text in cluster.floor_batches().items():
        (workdir / f"{name}.batch").write_text(text)


def run_once(
    topo: Topology, workdir: Path, args: argparse.Namespace, additions: int
) -> dict[str, Any]:
    with uplink_node(topo, "nod") as node:
        child = ["--child", "measure", "--workdir", str(workdir), "--timeout", str(args.timeout)]
        child += ["--additions", str(additions)] + (["--profile"] if args.profile else [])
        run_child(node, SCRIPT, child, timeout=args.timeout * 3)
    result: dict[str, Any] = json.loads((workdir / "result.json").read_text())
    with uplink_node(topo, "flr") as floor_ns:
        run_child(floor_ns, SCRIPT, ["--child", "floor", "--workdir", str(workdir)], args.timeout)
    result.update(json.loads((workdir / "floor.json").read_text()))
    return result


def _spread(values: list[float], unit: str = "s", digits: int = 2) -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f} {unit}"
    return f"{med:.{digits}f} {unit} ({min(values):.{digits}f} to {max(values):.{digits}f})"


def report(results: list[dict[str, Any]], cluster: Cluster, elapsed: float, backend: str) -> None:
    first = results[0]
    counts = first["counts"]
    programmed = [r["programmed_s"] for r in results]
    floors = [sum(r["floor"].values()) for r in results]
    ratios = [p / f for p, f in zip(programmed, floors, strict=True)]
    overlay = [
        r["first_stages"].get("apply: vxlan (device, neigh, fdb)", 0.0)
        + r["first_stages"].get("apply: routes", 0.0)
        for r in results
    ]
    lat = [x * 1000 for x in first["latencies_s"]]
    print()
    print(
        f"Node: {cluster.remote:,} remote nodes (VTEPs), {cluster.remote * cluster.blocks:,}"
        f" remote blocks (/{BLOCK_LEN}, {cluster.blocks} per node), IPv4, iptables {backend}"
        f" → kernel: {counts['routes']:,} routes (proto {ROUTE_PROTOCOL}), {counts['neighbours']:,}"
        f" permanent neighbours, {counts['fdb']:,} FDB entries on {DEVICE};"
        f" log {first['log_bytes'] / 1e6:.2f} MB."
        f" Median of {len(results)} run(s), range in brackets."
    )
    print(f"Machine: {machine()}")
    print()
    header = [
        "programmed (all messages → DataplaneInSync)",
        "floor (device + ip -batch neigh/routes + bridge -batch fdb)",
        "programmed / floor (goal <= 1.5x)",
        f"add one VTEP p50 / p99 ({len(lat)} additions)",
    ]
    row = [
        _spread(programmed, "s", 3),
        _spread(floors, "s", 3),
        f"{statistics.median(ratios):.1f}x "
        + ("(met)" if statistics.median(ratios) <= 1.5 else "(not met)"),
        f"{percentile(lat, 50):.1f} / {percentile(lat, 99):.1f} ms" if lat else "-",
    ]
    print(markdown_table(header, [row]))
    print()
    parts = ["device", "neigh+routes", "fdb"]
    print(
        "Floor parts (seconds, median): "
        + ", ".join(f"{p} {statistics.median(r['floor'][p] for r in results):.3f}" for p in parts)
    )
    print(
        f"Driver's overlay stages alone (vxlan + routes programmers) / floor:"
        f" {statistics.median(overlay):.3f} s / {statistics.median(floors):.3f} s"
        f" = {statistics.median(o / f for o, f in zip(overlay, floors, strict=True)):.1f}x"
    )
    print()
    print("Stage breakdown of the initial programming (seconds, per run; phase 2 = one apply):")
    rows = stage_rows(results)
    rows.append(["floor", *(f"{f:.3f}" for f in floors)])
    print(markdown_table(["stage", *(f"run {i + 1}" for i in range(len(results)))], rows))
    if lat:
        print()
        print("Applies while adding VTEPs (median per apply, ms):")
        stages = first["latency_stages"]
        rows = [
            [label, f"{statistics.median(v) * 1000:.1f} (max {max(v) * 1000:.0f})"]
            for label, v in sorted(stages.items())
        ]
        applies = first["applies_per_addition"]
        rows.append(
            [
                "applies per addition until landed",
                f"{statistics.median(applies)} (max {max(applies)})",
            ]
        )
        rows.append(["probe (not counted)", f"{statistics.median(first['probe_s']) * 1000:.1f}"])
        print(markdown_table(["stage", "median"], rows))
    print()
    for i, r in enumerate(results):
        ms = sorted(x * 1000 for x in r["latencies_s"])
        spread = f"min {ms[0]:.1f} max {ms[-1]:.1f}" if ms else "- (no additions this run)"
        print(
            f"[run {i + 1}] applies to in-sync {r['applies_to_in_sync']} (failures"
            f" {r['apply_failures']}, total {r['apply_failures_total']}); rejected {r['rejected']};"
            f" counts {r['counts']}, floor {r['floor_counts']}, after additions"
            f" {r.get('counts_end', '-')}; latency ms {spread};"
            f" RSS {r['rss_kb_after_load'] / 1024:.0f} MB after load;"
            f" GC during load {r['gc_first']['seconds']:.3f} s"
        )
    print(f"\nwhole run: {elapsed:.1f} s")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--remote-nodes", type=int, default=500, help="other nodes (VTEPs)")
    parser.add_argument("--blocks-per-node", type=int, default=4, help="blocks per remote node")
    parser.add_argument("--additions", type=int, default=50, help="VTEPs added after the load")
    parser.add_argument("--runs", type=int, default=3, help="repeat programmed and floor")
    parser.add_argument(
        "--quick", action="store_true", help="50 remote nodes, 10 additions, 1 run (unless given)"
    )
    parser.add_argument("--backend", default="legacy", choices=["legacy", "nft"])
    parser.add_argument("--profile", action="store_true", help="cProfile the driver")
    parser.add_argument("--timeout", type=float, default=300, help="per step, seconds")
    parser.add_argument("--child", choices=["measure", "floor"], help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    apply_quick(args, {"remote-nodes": 50, "additions": 10, "runs": 1})
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
    start = time.perf_counter()
    cluster = Cluster(args.remote_nodes, args.blocks_per_node, args.additions)
    results = []
    with (
        sigterm_unwinds(),
        Topology() as topo,
        tempfile.TemporaryDirectory(prefix="bench-overlay-") as tmp,
    ):
        workdir = Path(tmp)
        built = time.perf_counter()
        write_inputs(workdir, cluster, args.backend)
        print(f"generated the messages in {time.perf_counter() - built:.2f} s", flush=True)
        for run in range(max(1, args.runs)):
            result = run_once(topo, workdir, args, args.additions if run == 0 else 0)
            print(
                f"[run {run + 1}] programmed {result['programmed_s']:.3f} s,"
                f" floor {sum(result['floor'].values()):.3f} s",
                flush=True,
            )
            results.append(result)
    report(results, cluster, time.perf_counter() - start, args.backend)


if __name__ == "__main__":
    main()
