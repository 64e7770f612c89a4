"""The Linux platform on the real kernel: a generated node, both iptables backends.

For each backend (legacy, nft) in a fresh network namespace of its own:

1. **programmed**: time from feeding the node's whole message stream
   (decoding the framed log as the pipe would, then ``send_message`` of
   every envelope, ending with InSync) until ``DataplaneInSync`` comes out,
   i.e. the first apply is done: IP sets, iptables (raw, mangle, nat,
   filter; v4 and v6), routes, interface sysctls.
2. **floor**: the state programmed in 1 (dumped with ``ipset save``,
   ``iptables-save``, ``ip6tables-save`` and the routes with our protocol
   number) loaded into a second fresh namespace holding the same interfaces
   with the plain tools: ``ipset restore``, ``iptables-restore``,
   ``ip6tables-restore`` and ``ip -batch`` for the routes. The floor
   includes the routes; it does not include the per-interface sysctls the
   driver also writes (their cost is in the stage breakdown).
3. **ratio** programmed / floor.
4. **add one endpoint**: latency p50/p99 over ``--additions`` additions to
   the loaded node, each one ``WorkloadEndpointUpdate`` for a spare
   interface that already exists, measured until that endpoint's
   ``WorkloadEndpointStatusUpdate`` comes out (statuses are sent after each
   successful apply).
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
the generator's. Every namespace this script creates is named
``benchlx-<pid>-...`` and deleted at the end, also on error or Ctrl-C.

Needs root, ``ip``, ``ipset``, ``iptables-legacy*`` and ``iptables-nft*``.

Usage: python benchmarks/bench_linux.py [--quick] [--endpoints N] [--policies N]
       [--sets N] [--members N] [--additions N] [--backends legacy,nft]
       [--peers-in-node] [--profile] [--gc-freeze]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import cProfile
import gc
import hashlib
import io
import json
import logging
import os
import pstats
import random
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import trio
from google.protobuf.message import Message

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine, markdown_table, percentile, timed_tool
from dataplane.core.loop import Dataplane
from dataplane.linux.ipsets import IPSetsProgrammer
from dataplane.linux.platform import LinuxPlatform
from dataplane.linux.routes import RouteProgrammer
from dataplane.linux.sysctls import SysctlWriter
from dataplane.linux.table import Table
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import FrameDecoder
from dataplane.wire.msglog import build_log

ROUTE_PROTOCOL = 80  # LinuxPlatform's default route protocol number
NS_PREFIX = f"benchlx-{os.getpid()}-"
SCRIPT = Path(__file__).resolve()

T = TypeVar("T")


# ---------------------------------------------------------------------------
# The generated node.
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sizes:
    endpoints: int
    policies: int
    sets: int
    members: int
    spare: int  # extra interfaces, each added as one endpoint after the load


def add_size_arguments(parser: argparse.ArgumentParser) -> None:
    """The generated node's size: the defaults are the README's node."""
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--policies", type=int, default=200)
    parser.add_argument("--sets", type=int, default=500)
    parser.add_argument("--members", type=int, default=100_000)


def _hash_id(prefix: str, text: str) -> str:
    """A Felix-style IP set id: prefix + 28 characters of a hash."""
    digest = hashlib.sha224(text.encode()).digest()
    return prefix + base64.urlsafe_b64encode(digest).decode()[:28]


def iface_name(index: int) -> str:
    """Host-side interface name, as Calico names it: cali + 11 hex digits."""
    return "cali" + hashlib.sha1(f"pod-{index}".encode()).hexdigest()[:11]


def peer_name(index: int) -> str:
    return "pe" + hashlib.sha1(f"pod-{index}".encode()).hexdigest()[:11]


def _ipv4(index: int) -> str:
    n = index + 1
    return f"10.65.{(n >> 8) & 255}.{n & 255}"


def _ipv6(index: int) -> str:
    return f"fd00:10:65::{index + 1:x}"


@dataclass(slots=True)
class _SetPlan:
    id: str
    type: pb.IPSetUpdate.IPSetType
    size: int


class NodeBuilder:
    """Deterministic (seeded) messages for one node of the given size."""

    def __init__(self, sizes: Sizes, backend: str, seed: int = 7) -> None:
        self.sizes = sizes
        self.backend = backend
        self.rng = random.Random(seed)
        self.namespaces = [f"ns-{i:03d}" for i in range(max(1, sizes.endpoints // 20))]
        self._counter = 0
        self.sets = self._plan_sets()
        self.ip_sets = [s.id for s in self.sets if s.type == pb.IPSetUpdate.IP]
        self.port_sets = [s.id for s in self.sets if s.type == pb.IPSetUpdate.IP_AND_PORT]
        self.net_sets = [s.id for s in self.sets if s.type == pb.IPSetUpdate.NET]
        n_global = max(1, sizes.policies // 10) if sizes.policies > 1 else 0
        self.global_policies = [
            pb.PolicyID(name=f"security.global-{i:03d}", kind="GlobalNetworkPolicy")
            for i in range(n_global)
        ]
        self.ns_policies: dict[str, list[pb.PolicyID]] = defaultdict(list)
        for i in range(sizes.policies - n_global):
            ns = self.namespaces[i % len(self.namespaces)]
            self.ns_policies[ns].append(
                pb.PolicyID(name=f"knp.default.pol-{i:04d}", namespace=ns, kind="NetworkPolicy")
            )

    # -- IP sets ----------------------------------------------------------------

    def _plan_sets(self) -> list[_SetPlan]:
        n = self.sizes.sets
        special = max(2, n // 50) if n >= 8 else 1
        types = [pb.IPSetUpdate.IP_AND_PORT] * special + [pb.IPSetUpdate.NET] * special
        types += [pb.IPSetUpdate.IP] * (n - len(types))
        # Long-tailed sizes: a few big sets (namespaces, "all pods"), many small.
        weights = [self.rng.paretovariate(1.1) for _ in range(n)]
        total = sum(weights)
        cap = max(1, self.sizes.members // 10)
        sizes = [max(1, min(cap, round(w / total * self.sizes.members))) for w in weights]
        # Spread the rounding error over the sets that have room for it.
        diff = self.sizes.members - sum(sizes)
        for k in range(n * (abs(diff) + 1)):
            if diff == 0:
                break
            j = k % n
            if diff > 0 and sizes[j] < cap:
                sizes[j] += 1
                diff -= 1
            elif diff < 0 and sizes[j] > 1:
                sizes[j] -= 1
                diff += 1
        plans = []
        for i, (kind, size) in enumerate(zip(types, sizes, strict=True)):
            prefix = "n:" if kind == pb.IPSetUpdate.IP_AND_PORT else "s:"
            plans.append(_SetPlan(_hash_id(prefix, f"set-{i}"), kind, size))
        return plans

    def _member(self, kind: pb.IPSetUpdate.IPSetType) -> str:
        c = self._counter
        self._counter += 1
        v6 = c % 10 == 9  # mostly IPv4, one in ten IPv6
        if kind == pb.IPSetUpdate.IP:
            if v6:
                return f"fd00:20:{(c >> 16) & 0xFFFF:x}::{c & 0xFFFF:x}"
            return f"10.{128 + ((c >> 16) & 63)}.{(c >> 8) & 255}.{c & 255}"
        if kind == pb.IPSetUpdate.IP_AND_PORT:
            port = 8000 + c % 50
            if v6:
                return f"fd00:30:{(c >> 16) & 0xFFFF:x}::{c & 0xFFFF:x},tcp:{port}"
            return f"10.{192 + ((c >> 16) & 63)}.{(c >> 8) & 255}.{c & 255},tcp:{port}"
        if v6:
            return f"2001:db8:{c & 0xFFFF:x}::/48"
        return f"{100 + ((c >> 16) & 15)}.{(c >> 8) & 255}.{c & 255}.0/24"

    def ipset_updates(self) -> list[Message]:
        return [
            pb.IPSetUpdate(
                id=s.id, type=s.type, members=[self._member(s.type) for _ in range(s.size)]
            )
            for s in self.sets
        ]

    # -- policies -------------------------------------------------------------------

    def _pick(self, pool: list[str]) -> str:
        return self.rng.choice(pool) if pool else self.rng.choice(self.ip_sets)

    def _default_rules(self) -> tuple[list[pb.Rule], list[pb.Rule]]:
        tcp, udp = pb.Protocol(name="tcp"), pb.Protocol(name="udp")
        ip, named, r = self.ip_sets, self.port_sets, self.rng
        port = r.randrange(1024, 30000)
        inbound = [
            pb.Rule(
                action="allow",
                protocol=tcp,
                src_ip_set_ids=[self._pick(ip)],
                dst_ports=[pb.PortRange(first=port, last=port)],
            ),
            pb.Rule(
                action="allow",
                protocol=tcp,
                src_ip_set_ids=[self._pick(ip)],
                dst_ports=[pb.PortRange(first=8000, last=8100), pb.PortRange(first=9090)],
            ),
            pb.Rule(
                action="allow",
                protocol=tcp,
                src_ip_set_ids=[self._pick(ip)],
                dst_named_port_ip_set_ids=[self._pick(named)],
            ),
            pb.Rule(
                action="deny",
                protocol=tcp,
                not_src_ip_set_ids=[self._pick(ip)],
                not_dst_ports=[pb.PortRange(first=443)],
            ),
            pb.Rule(
                action="allow",
                protocol=pb.Protocol(name="icmp"),
                icmp_type=8,
                ip_version=pb.IPV4,
                src_ip_set_ids=[self._pick(ip)],
            ),
            pb.Rule(
                action="allow",
                protocol=pb.Protocol(name="icmpv6"),
                icmp_type=128,
                ip_version=pb.IPV6,
            ),
        ]
        outbound = [
            pb.Rule(
                action="allow",
                protocol=udp,
                dst_ip_set_ids=[self._pick(ip)],
                dst_ports=[pb.PortRange(first=53)],
            ),
            pb.Rule(
                action="allow",
                protocol=tcp,
                dst_ip_set_ids=[self._pick(ip)],
                dst_named_port_ip_set_ids=[self._pick(named)],
            ),
            pb.Rule(
                action="deny",
                protocol=tcp,
                not_dst_net=["10.0.0.0/8", "fd00::/8"],
                dst_ports=[pb.PortRange(first=25)],
            ),
            pb.Rule(
                action="allow",
                protocol=tcp,
                dst_ip_set_ids=[self._pick(ip)],
                dst_ports=[pb.PortRange(first=5432), pb.PortRange(first=6379)],
            ),
        ]
        return inbound, outbound

    def _security_rules(self) -> tuple[list[pb.Rule], list[pb.Rule]]:
        tcp = pb.Protocol(name="tcp")
        net = self.net_sets
        inbound = [
            pb.Rule(action="deny", src_ip_set_ids=[self._pick(net)]),
            pb.Rule(action="deny", src_ip_set_ids=[self._pick(net)]),
            pb.Rule(
                action="deny",
                protocol=tcp,
                src_net=["192.0.2.0/24", "2001:db8:ffff::/48"],
                dst_ports=[pb.PortRange(first=22)],
            ),
            pb.Rule(
                action="allow",
                protocol=pb.Protocol(name="icmp"),
                icmp_type=8,
                ip_version=pb.IPV4,
            ),
            pb.Rule(
                action="deny",
                protocol=pb.Protocol(name="icmpv6"),
                not_icmp_type=128,
                ip_version=pb.IPV6,
            ),
            pb.Rule(action="pass"),
        ]
        outbound = [
            pb.Rule(action="deny", dst_ip_set_ids=[self._pick(net)]),
            pb.Rule(
                action="deny",
                protocol=tcp,
                dst_ip_set_ids=[self._pick(net)],
                not_dst_ports=[pb.PortRange(first=80), pb.PortRange(first=443)],
            ),
            pb.Rule(action="deny", not_protocol=pb.Protocol(name="tcp"), dst_net=["0.0.0.0/0"]),
            pb.Rule(action="pass"),
        ]
        return inbound, outbound

    def policy_updates(self) -> list[Message]:
        out: list[Message] = []
        for pid in self.global_policies:
            inbound, outbound = self._security_rules()
            out.append(
                pb.ActivePolicyUpdate(
                    id=pid,
                    policy=pb.Policy(
                        tier="security", inbound_rules=inbound, outbound_rules=outbound
                    ),
                )
            )
        for ns in self.namespaces:
            for pid in self.ns_policies[ns]:
                inbound, outbound = self._default_rules()
                out.append(
                    pb.ActivePolicyUpdate(
                        id=pid,
                        policy=pb.Policy(
                            tier="default",
                            namespace=ns,
                            inbound_rules=inbound,
                            outbound_rules=outbound,
                        ),
                    )
                )
        return out

    def profile_updates(self) -> list[Message]:
        out: list[Message] = []
        for ns in self.namespaces:
            out.append(
                pb.ActiveProfileUpdate(
                    id=pb.ProfileID(name=f"kns.{ns}"),
                    profile=pb.Profile(
                        inbound_rules=[pb.Rule(action="allow")],
                        outbound_rules=[pb.Rule(action="allow")],
                    ),
                )
            )
            out.append(
                pb.ActiveProfileUpdate(
                    id=pb.ProfileID(name=f"ksa.{ns}.default"), profile=pb.Profile()
                )
            )
        return out

    # -- endpoints --------------------------------------------------------------------

    def _tiers(self, index: int, ns: str) -> list[pb.TierInfo]:
        tiers = []
        if self.global_policies:
            g = self.global_policies[index % len(self.global_policies)]
            tiers.append(
                pb.TierInfo(
                    name="security",
                    ingress_policies=[g],
                    egress_policies=[g],
                    default_action="Pass",
                )
            )
        pool = self.ns_policies.get(ns) or [p for ps in self.ns_policies.values() for p in ps]
        if pool:
            # With the security tier: 3-5 policies per direction in all.
            k_in = min(len(pool), self.rng.randint(2, 4))
            k_out = min(len(pool), self.rng.randint(2, 4))
            tiers.append(
                pb.TierInfo(
                    name="default",
                    ingress_policies=self.rng.sample(pool, k_in),
                    egress_policies=self.rng.sample(pool, k_out),
                    default_action="Deny",
                )
            )
        return tiers

    def endpoint_update(self, index: int) -> pb.WorkloadEndpointUpdate:
        ns = self.namespaces[index % len(self.namespaces)]
        return pb.WorkloadEndpointUpdate(
            id=pb.WorkloadEndpointID(
                orchestrator_id="k8s", workload_id=f"{ns}/pod-{index:05d}", endpoint_id="eth0"
            ),
            endpoint=pb.WorkloadEndpoint(
                state="active",
                name=iface_name(index),
                mac="ee:ee:ee:" + ":".join(f"{(index >> b) & 255:02x}" for b in (16, 8, 0)),
                profile_ids=[f"kns.{ns}", f"ksa.{ns}.default"],
                ipv4_nets=[f"{_ipv4(index)}/32"],
                ipv6_nets=[f"{_ipv6(index)}/128"],
                tiers=self._tiers(index, ns),
            ),
        )

    # -- the whole stream ---------------------------------------------------------------

    def snapshot(self) -> list[Message]:
        """Everything Felix sends a starting node, ending with InSync."""
        msgs: list[Message] = [
            pb.ConfigUpdate(
                config={
                    "IptablesBackend": self.backend,
                    "Ipv6Support": "true",
                    "InterfacePrefix": "cali",
                    "ChainInsertMode": "insert",
                    "FelixHostname": "bench-node",
                    "DefaultEndpointToHostAction": "ACCEPT",
                    "LogSeverityScreen": "Warning",
                }
            ),
            pb.HostMetadataUpdate(hostname="bench-node", ipv4_addr="192.168.56.11"),
            pb.IPAMPoolUpdate(
                id="10.65.0.0-16", pool=pb.IPAMPool(cidr="10.65.0.0/16", masquerade=True)
            ),
            pb.IPAMPoolUpdate(id="fd00-10-65---48", pool=pb.IPAMPool(cidr="fd00:10:65::/48")),
        ]
        msgs += self.profile_updates()
        msgs += self.ipset_updates()
        msgs += self.policy_updates()
        msgs += [self.endpoint_update(i) for i in range(self.sizes.endpoints)]
        msgs.append(pb.InSync())
        return msgs

    def additions(self) -> list[Message]:
        """One WorkloadEndpointUpdate per spare interface."""
        first = self.sizes.endpoints
        return [self.endpoint_update(i) for i in range(first, first + self.sizes.spare)]


# ---------------------------------------------------------------------------
# Namespaces and links (parent side).
# ---------------------------------------------------------------------------

_CREATED: list[str] = []


def _run(argv: list[str], stdin: bytes | None = None, timeout: float = 300) -> str:
    proc = subprocess.run(argv, input=stdin, capture_output=True, check=False, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[:6])}: exit {proc.returncode}: {proc.stderr.decode()[:500]}"
        )
    return proc.stdout.decode()


def create_netns(role: str) -> str:
    name = NS_PREFIX + role
    _run(["ip", "netns", "add", name])
    _CREATED.append(name)
    return name


def delete_netns(name: str) -> None:
    if name in _CREATED:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
        _CREATED.remove(name)


def delete_all_netns() -> None:
    for name in list(_CREATED):
        delete_netns(name)


def add_links(netns: str, count: int, peer_netns: str | None = None) -> float:
    """``count`` veth pairs, host side in ``netns``, all up; returns seconds taken.

    The peer stays in ``netns`` too unless ``peer_netns`` is given (then it
    goes there, as a pod's eth0 would). A dummy link each would be cheaper
    to create, but many kernels, this CI's included, are built without the
    dummy driver; veth is always there.
    """
    where = f" netns {peer_netns}" if peer_netns else ""
    lines = [
        f"link add {iface_name(i)} type veth peer name {peer_name(i)}{where}" for i in range(count)
    ]
    lines += [f"link set {iface_name(i)} up" for i in range(count)]
    peers = [f"link set {peer_name(i)} up" for i in range(count)]
    start = time.perf_counter()
    _run(["ip", "-n", netns, "-batch", "-"], stdin="".join(f"{x}\n" for x in lines).encode())
    _run(
        ["ip", "-n", peer_netns or netns, "-batch", "-"],
        stdin="".join(f"{x}\n" for x in peers).encode(),
    )
    return time.perf_counter() - start


def run_in_netns(netns: str, args: list[str], timeout: float) -> None:
    argv = ["ip", "netns", "exec", netns, sys.executable, str(SCRIPT), *args]
    subprocess.run(argv, check=True, timeout=timeout)


# ---------------------------------------------------------------------------
# Stage timings (child side): wrap the programmers' entry points.
# ---------------------------------------------------------------------------

STAGES: dict[str, list[float]] = defaultdict(list)


def _wrap_async(cls: type, attr: str, label: Callable[[Any], str]) -> None:
    original: Callable[..., Awaitable[Any]] = getattr(cls, attr)

    async def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await original(self, *args, **kwargs)
        finally:
            STAGES[label(self)].append(time.perf_counter() - start)

    setattr(cls, attr, timed)


def _wrap_sync(cls: type, attr: str, label: str) -> None:
    original: Callable[..., Any] = getattr(cls, attr)

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            STAGES[label].append(time.perf_counter() - start)

    setattr(cls, attr, timed)


def instrument() -> None:
    _wrap_sync(Dataplane, "_phase1", "phase 1 (managers)")
    _wrap_async(Dataplane, "_apply", lambda _s: "apply: total")
    _wrap_async(LinuxPlatform, "_start", lambda _s: "apply: platform start")
    _wrap_sync(LinuxPlatform, "_write", "apply: render")
    _wrap_async(IPSetsProgrammer, "apply_updates", lambda _s: "apply: ipsets update")
    _wrap_async(Table, "apply", lambda s: f"apply: iptables {s.name} v{s.version}")
    _wrap_async(RouteProgrammer, "apply", lambda _s: "apply: routes")
    _wrap_async(SysctlWriter, "apply", lambda _s: "apply: sysctls")
    _wrap_async(IPSetsProgrammer, "apply_deletions", lambda _s: "apply: ipsets delete")


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


def _print_profile(title: str, profile: cProfile.Profile, top: int) -> None:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.strip_dirs().sort_stats("cumulative").print_stats(top)
    print(f"\n=== {title}: top {top} by cumulative time ===")
    print(out.getvalue())
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(top // 2)
    print(f"=== {title}: top {top // 2} by own time ===")
    print(out.getvalue())


# ---------------------------------------------------------------------------
# The measurement (child side, inside the node namespace).
# ---------------------------------------------------------------------------


def _sh(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, check=True).stdout.decode()


def dump_state(backend: str, out: Path) -> dict[str, int]:
    """Save what is programmed, in the plain tools' formats, for the floor."""
    v4 = _sh([f"iptables-{backend}-save"])
    v6 = _sh([f"ip6tables-{backend}-save"])
    sets = _sh(["ipset", "save"])
    (out / "iptables.save").write_text(v4)
    (out / "ip6tables.save").write_text(v6)
    (out / "ipset.save").write_text(sets)
    routes: list[str] = []
    for family in ("-4", "-6"):
        text = _sh(["ip", "-j", family, "route", "show", "table", "main"])
        for r in json.loads(text or "[]"):
            if r.get("protocol") not in (str(ROUTE_PROTOCOL), ROUTE_PROTOCOL):
                continue
            scope = " scope link" if family == "-4" else ""
            routes.append(f"route add {r['dst']} dev {r['dev']} proto {ROUTE_PROTOCOL}{scope}")
    (out / "routes.batch").write_text("".join(f"{line}\n" for line in routes))
    return {
        "rules_v4": sum(1 for x in v4.splitlines() if x.startswith("-A ")),
        "rules_v6": sum(1 for x in v6.splitlines() if x.startswith("-A ")),
        "chains_v4": sum(1 for x in v4.splitlines() if x.startswith(":")),
        "sets": sum(1 for x in sets.splitlines() if x.startswith("create ")),
        "members": sum(1 for x in sets.splitlines() if x.startswith("add ")),
        "routes": len(routes),
        "bytes_iptables": len(v4) + len(v6),
        "bytes_ipset": len(sets),
    }


def _key(wid: pb.WorkloadEndpointID) -> tuple[str, str, str]:
    return (wid.orchestrator_id, wid.workload_id, wid.endpoint_id)


async def _measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    data = (workdir / "node.log").read_bytes()
    additions = FrameDecoder().feed((workdir / "additions.log").read_bytes())
    threads = ThreadProfiles()
    if args.profile:
        threads.install()
    main_profile = cProfile.Profile()
    dp = Dataplane(LinuxPlatform())
    result: dict[str, Any] = {"backend": args.backend, "log_bytes": len(data)}
    statuses: dict[tuple[str, str, str], str] = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(dp.run)
        await trio.sleep(0.05)  # let the loop start and wait for input
        if args.profile:
            threads.active = True
            main_profile.enable()
        GC.take()
        start = time.perf_counter()
        envelopes = FrameDecoder().feed(data)
        decoded = time.perf_counter()
        for envelope in envelopes:
            dp.send_message(envelope)
        del envelopes
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
        if args.gc_freeze:
            gc.freeze()  # what an embedder can do: the loaded state is never collected again
        if args.profile:
            main_profile.disable()
            threads.active = False
        result["programmed_s"] = done - start
        result["decode_s"] = decoded - start
        result["first_stages"] = {k: sum(v) for k, v in STAGES.items()}
        result["applies_to_in_sync"] = dp.stats.applies + dp.stats.apply_failures
        result["apply_failures"] = dp.stats.apply_failures
        result["rejected"] = dp.stats.rejected
        result["endpoints_up"] = sum(1 for s in statuses.values() if s == "up")
        result["rss_kb_after_load"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        STAGES.clear()

        dump_start = time.perf_counter()
        result["dump"] = dump_state(args.backend, workdir)
        result["dump_s"] = time.perf_counter() - dump_start

        if args.profile:
            _print_profile(f"{args.backend}: initial programming, main thread", main_profile, 40)
            _print_profile(
                f"{args.backend}: initial programming, worker threads", threads.profile, 20
            )
            main_profile = cProfile.Profile()
            threads.profile = cProfile.Profile()
            threads.active = True
            main_profile.enable()

        # Adding one endpoint at a time to the loaded node.
        rng = random.Random(3)
        applies_before = dp.stats.applies
        latencies = []
        for envelope in additions:
            await trio.sleep(rng.uniform(0.0, 0.05))  # spread additions out in time
            want = _key(envelope.workload_endpoint_update.id)
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
        result["latencies_s"] = latencies
        result["latency_applies"] = dp.stats.applies - applies_before
        result["latency_stages"] = {k: list(v) for k, v in STAGES.items()}
        result["apply_failures_total"] = dp.stats.apply_failures
        result["gc_additions"] = GC.take()
        if args.profile:
            main_profile.disable()
            threads.active = False
            title = f"{args.backend}: {len(additions)} additions"
            _print_profile(f"{title}, main thread", main_profile, 30)
            _print_profile(f"{title}, worker threads", threads.profile, 20)
        dp.close_input()
    result["rss_kb_end"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return result


class GCTimes:
    """Time spent in the cyclic garbage collector, per generation."""

    def __init__(self) -> None:
        self._start = 0.0
        self.total = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self.longest = 0.0

    def _reset(self) -> None:
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
        out = {"seconds": sum(self.total), "gen2": self.count[2], "gen2_s": self.total[2]}
        out["longest_s"] = self.longest
        self._reset()
        return out


GC = GCTimes()


def child_measure(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING, format="  [driver] %(levelname)s %(message)s")
    instrument()
    gc.callbacks.append(GC.callback)
    workdir = Path(args.workdir)
    result = trio.run(_measure, args, workdir)
    (workdir / "result.json").write_text(json.dumps(result))


def child_floor(args: argparse.Namespace) -> None:
    """Load the saved state with the plain tools (inside a fresh namespace)."""
    workdir, b = Path(args.workdir), args.backend
    # A fresh namespace holds none of it; make sure, and never touch anything else.
    leftovers = _sh(["ipset", "list", "-name"]).split()
    rules = _sh([f"iptables-{b}-save"]).count("\n-A ")
    if leftovers or rules:
        raise RuntimeError(f"floor namespace is not empty: {leftovers[:5]} {rules} rules")
    floor = {
        "ipset": timed_tool(["ipset", "restore"], workdir / "ipset.save"),
        "iptables": timed_tool([f"iptables-{b}-restore"], workdir / "iptables.save"),
        "ip6tables": timed_tool([f"ip6tables-{b}-restore"], workdir / "ip6tables.save"),
        "routes": timed_tool(["ip", "-batch", "-"], workdir / "routes.batch"),
    }
    check = {
        "rules_v4": _sh([f"iptables-{b}-save"]).count("\n-A "),
        "members": _sh(["ipset", "save"]).count("\nadd "),
    }
    (workdir / "floor.json").write_text(json.dumps({"floor": floor, "check": check}))


# ---------------------------------------------------------------------------
# Orchestration and report (parent side).
# ---------------------------------------------------------------------------


@contextlib.contextmanager
def node_namespace(role: str, links: int, peer_netns: bool) -> Iterator[tuple[str, float]]:
    """A fresh namespace with ``links`` veth pairs; deleted on the way out."""
    node = create_netns(role)
    pods = None
    try:
        if peer_netns:
            pods = create_netns(f"{role}-pods")
        yield node, add_links(node, links, pods)
    finally:
        delete_netns(node)
        if pods:
            delete_netns(pods)


def run_backend(
    backend: str, sizes: Sizes, logs: tuple[bytes, bytes], args: argparse.Namespace
) -> dict[str, Any]:
    links = sizes.endpoints + sizes.spare
    with tempfile.TemporaryDirectory(prefix=f"bench-linux-{backend}-") as tmp:
        workdir = Path(tmp)
        (workdir / "node.log").write_bytes(logs[0])
        (workdir / "additions.log").write_bytes(logs[1])
        with node_namespace(f"{backend}-node", links, args.peer_netns) as (node, setup_s):
            where = "a namespace of their own" if args.peer_netns else "the node namespace"
            print(
                f"[{backend}] {node}: {links} veth pairs (peers in {where}) in {setup_s:.2f} s",
                flush=True,
            )
            child = ["--child", "measure", "--backend", backend, "--workdir", tmp]
            child += ["--timeout", str(args.timeout)] + (["--profile"] if args.profile else [])
            child += ["--gc-freeze"] if args.gc_freeze else []
            run_in_netns(node, child, timeout=args.timeout * 3)
        result: dict[str, Any] = json.loads((workdir / "result.json").read_text())
        result["link_setup_s"] = setup_s
        with node_namespace(f"{backend}-floor", links, args.peer_netns) as (floor_ns, _):
            child = ["--child", "floor", "--backend", backend, "--workdir", tmp]
            run_in_netns(floor_ns, child, timeout=args.timeout)
        result.update(json.loads((workdir / "floor.json").read_text()))
    return result


def _summary_row(r: dict[str, Any]) -> list[str]:
    floor = r["floor"]
    floor_total = sum(floor.values())
    lat = [x * 1000 for x in r["latencies_s"]]
    return [
        r["backend"],
        f"{r['programmed_s']:.2f} s",
        f"{floor_total:.2f} s ({floor['ipset']:.2f} ipset + "
        f"{floor['iptables'] + floor['ip6tables']:.2f} iptables + {floor['routes']:.2f} routes)",
        f"{r['programmed_s'] / floor_total:.1f}x",
        f"{percentile(lat, 50):.0f} / {percentile(lat, 99):.0f} ms" if lat else "-",
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
        "iptables backend",
        "programmed (all messages → DataplaneInSync)",
        "floor (ipset + iptables/ip6tables-restore + ip -batch routes)",
        "programmed / floor",
        f"add one endpoint p50 / p99 ({len(results[0]['latencies_s'])} additions)",
        "peak RSS after load",
    ]
    print(markdown_table(header, [_summary_row(r) for r in results]))
    print()
    print("Stage breakdown of the initial programming (seconds; phase 2 = one apply):")
    labels: list[str] = []
    for r in results:
        labels += [k for k in r["first_stages"] if k not in labels]
    rows = [["decode (FrameDecoder)", *(f"{r['decode_s']:.3f}" for r in results)]]
    rows += [
        [label, *(f"{r['first_stages'].get(label, 0.0):.3f}" for r in results)]
        for label in sorted(labels)
    ]
    rows.append(["**programmed**", *(f"{r['programmed_s']:.3f}" for r in results)])
    print(markdown_table(["stage", *(r["backend"] for r in results)], rows))
    print()
    print("Applies while adding endpoints (median per apply, ms):")
    labels = []
    for r in results:
        labels += [k for k in r["latency_stages"] if k not in labels]
    rows = [
        [
            label,
            *(
                f"{statistics.median(r['latency_stages'][label]) * 1000:.1f}"
                f" (max {max(r['latency_stages'][label]) * 1000:.0f})"
                if r["latency_stages"].get(label)
                else "-"
                for r in results
            ),
        ]
        for label in sorted(labels)
    ]
    rows.append(["applies during the additions", *(str(r["latency_applies"]) for r in results)])
    print(markdown_table(["stage", *(r["backend"] for r in results)], rows))
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


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def cleanup_on_exit() -> Iterator[None]:
    old = signal.signal(signal.SIGTERM, _on_signal)
    try:
        yield
    finally:
        delete_all_netns()
        signal.signal(signal.SIGTERM, old)


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
    parser.add_argument("--backends", default="legacy,nft")
    parser.add_argument("--profile", action="store_true", help="cProfile the initial programming")
    parser.add_argument("--timeout", type=float, default=600, help="per step, seconds")
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="experiment: gc.freeze() in the driver process once it is loaded",
    )
    parser.add_argument("--child", choices=["measure", "floor"], help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        given = set(sys.argv)
        for flag, value in (("endpoints", 100), ("policies", 20), ("sets", 50)):
            if f"--{flag}" not in given:
                setattr(args, flag, value)
        if "--members" not in given:
            args.members = 10_000
        if "--additions" not in given:
            args.additions = 20
    return args


def main() -> None:
    args = parse_args()
    if args.child == "measure":
        child_measure(args)
        return
    if args.child == "floor":
        child_floor(args)
        return
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces, iptables, ipset)")
    sizes = Sizes(args.endpoints, args.policies, args.sets, args.members, args.additions)
    start = time.perf_counter()
    results = []
    with cleanup_on_exit():
        for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
            built = time.perf_counter()
            builder = NodeBuilder(sizes, backend)
            logs = (build_log(builder.snapshot()), build_log(builder.additions(), first_seq=10**6))
            print(
                f"[{backend}] generated the node's messages in {time.perf_counter() - built:.2f} s",
                flush=True,
            )
            results.append(run_backend(backend, sizes, logs, args))
    report(results, sizes, time.perf_counter() - start)


if __name__ == "__main__":
    main()
