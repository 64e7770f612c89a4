"""Throwaway node/pod topologies in network namespaces, probed with real packets.

Model (docs/architecture.md, "How it is tested")::

    external (eth0 .200.2) ==veth== (eth0 .200.1) node ==cali*== eth0 pod

A :class:`Node` is a namespace with an uplink to its own external host and a
default route through it (proxy ARP only answers for addresses the node can
route). A :class:`Pod` is wired exactly as Calico's CNI wires it and nothing
more: routes to the pod, proxy ARP and forwarding sysctls on the host side are
the driver's job. ``Node.wire_pod_manually`` stands in for the driver in this
library's own self-test only.

Invariants: a :class:`Topology` owns every namespace it creates (names start
with its ``prefix``) and deletes them all on exit, exceptions included, after
stopping the agents and killing anything else running inside. Traffic only
ever goes to addresses inside those namespaces.

Verdicts come from :mod:`testbed.agent`, one long-lived process per
namespace, started on first use.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from testbed.agent import AgentClient, AgentError, HeldConnection, ProbeResult

__all__ = [
    "HOST_VETH_LL",
    "HOST_VETH_MAC",
    "POD_CIDR_V4",
    "POD_CIDR_V6",
    "AgentError",
    "CommandError",
    "External",
    "Family",
    "HeldConnection",
    "Namespace",
    "Node",
    "Pod",
    "ProbeResult",
    "Proto",
    "Topology",
    "TopologyError",
    "connectivity_matrix",
    "kernel_unavailable",
    "list_netns",
    "sigterm_unwinds",
]

Proto = Literal["tcp", "udp"]
Family = Literal[4, 6]

POD_CIDR_V4 = "10.65.0.0/16"
POD_CIDR_V6 = "fd00:10:65::/48"
NODE_UPLINK = {4: ("192.168.200.1", "192.168.200.2", 24), 6: ("fd00:200::1", "fd00:200::2", 64)}
HOST_VETH_MAC = "ee:ee:ee:ee:ee:ee"
# EUI-64 link-local of HOST_VETH_MAC: the pod's IPv6 gateway, as in Calico.
HOST_VETH_LL = "fe80::ecee:eeff:feee:eeee"
COMMAND_TIMEOUT = 10.0

_topology_ids = itertools.count()


class TopologyError(RuntimeError):
    """Building or tearing down a topology failed."""


class CommandError(TopologyError):
    """A command exited non-zero; carries its stderr, which says why."""

    def __init__(self, result: subprocess.CompletedProcess[str]) -> None:
        super().__init__(
            f"{' '.join(result.args)} exited {result.returncode}: {result.stderr.strip()}"
        )
        self.result = result


def _run(
    argv: Sequence[str],
    *,
    check: bool = True,
    stdin: str | None = None,
    timeout: float = COMMAND_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        list(argv),
        check=False,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        raise CommandError(result)
    return result


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt inside, so a Topology still deletes its namespaces.

    For programs (the demo, the benchmarks) that a user or CI may stop with
    SIGTERM; pytest handles its own signals.
    """

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def list_netns() -> list[str]:
    """Names of all namespaces ``ip netns`` knows, in any test run."""
    out = _run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def kernel_unavailable() -> str | None:
    """Why namespaces cannot be built here (a short phrase), or None when they can."""
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    try:
        _run(["ip", "netns", "list"])
    except (OSError, subprocess.SubprocessError, CommandError) as exc:
        return f"`ip netns` is unavailable: {exc}"
    return None


class Namespace:
    """One namespace of a topology: commands, sysctls and traffic."""

    def __init__(
        self, topology: Topology, name: str, netns: str, addresses: Mapping[int, str] | None = None
    ) -> None:
        self.topology = topology
        self.name = name
        self.netns = netns
        self.addresses = dict(addresses or {})  # per family: where probes aim
        self.agent = AgentClient(netns, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, netns={self.netns!r})"

    def address(self, family: Family = 4) -> str:
        """This namespace's address to aim probes at."""
        if family in self.addresses:
            return self.addresses[family]
        raise TopologyError(f"{self!r} has no address for IPv{family}")

    # --- configuration ------------------------------------------------------

    def run(
        self, *argv: str, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self.topology.run(self, *argv, check=check, stdin=stdin)

    def ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run(["ip", "-n", self.netns, *args], check=check)

    def ip_batch(self, *commands: str) -> None:
        """Run several ``ip`` commands in one process (they cost ~3 ms each)."""
        _run(["ip", "-n", self.netns, "-batch", "-"], stdin="".join(f"{c}\n" for c in commands))

    def set_sysctls(self, values: Mapping[str, str | int]) -> None:
        """Write sysctls (dotted names) through /proc/sys, all in one shell."""
        script = " && ".join(
            f"echo {value} > /proc/sys/{key.replace('.', '/')}" for key, value in values.items()
        )
        self.run("sh", "-c", script)

    def sysctl(self, key: str) -> str:
        return self.run("cat", f"/proc/sys/{key.replace('.', '/')}").stdout.strip()

    # --- traffic ------------------------------------------------------------

    def listen(self, proto: Proto, port: int, family: Family | None = None) -> None:
        """Start a server answering with this namespace's name (both families by default)."""
        for fam in (4, 6) if family is None else (family,):
            self.agent.call("listen", proto=proto, port=port, family=fam)

    def peers(self, proto: Proto, port: int) -> list[str]:
        """Source addresses the server on ``port`` has seen, oldest first."""
        peers: list[str] = self.agent.call("peers", proto=proto, port=port)["peers"]
        return peers

    def connect(
        self, proto: Proto, dst: str, port: int, timeout: float = 1.0, sport: int | None = None
    ) -> ProbeResult:
        """One probe; ``sport`` fixes the source port (else an ephemeral one)."""
        extra = {} if sport is None else {"sport": sport}
        return ProbeResult(
            **self.agent.call("connect", timeout, proto=proto, dst=dst, port=port, **extra)
        )

    def can_connect(self, proto: Proto, dst: str, port: int, timeout: float = 1.0) -> bool:
        return self.connect(proto, dst, port, timeout).ok

    def icmp(self, dst: str, timeout: float = 1.0) -> ProbeResult:
        return ProbeResult(**self.agent.call("icmp", timeout, dst=dst))

    def ping(self, dst: str, timeout: float = 1.0) -> bool:
        return self.icmp(dst, timeout).ok

    def hold(
        self, proto: Literal["tcp"], dst: str, port: int, timeout: float = 1.0
    ) -> HeldConnection:
        """Open a TCP connection and keep it; raises AgentError if it is not answered."""
        return self.agent.hold(proto, dst, port, timeout)


class External(Namespace):
    """A host beyond the node's uplink routing pods back via it, or an underlay's client."""


class Pod(Namespace):
    """A pod namespace; ``iface`` is its host-side veth in the node namespace."""

    def __init__(
        self,
        topology: Topology,
        name: str,
        netns: str,
        *,
        node: Node,
        ipv4: str,
        ipv6: str | None,
        iface: str,
    ) -> None:
        super().__init__(topology, name, netns)
        self.node = node
        self.ipv4 = ipv4
        self.ipv6 = ipv6
        self.iface = iface

    def address(self, family: Family = 4) -> str:
        addr = self.ipv4 if family == 4 else self.ipv6
        if addr is None:
            return super().address(family)
        return addr


class Node(Namespace):
    """A Kubernetes node: uplink to ``external``, forwarding on, pods hang off it."""

    def __init__(
        self,
        topology: Topology,
        name: str,
        netns: str,
        external: External,
        addresses: Mapping[int, str] | None = None,
    ) -> None:
        super().__init__(topology, name, netns, addresses)
        self.external = external
        self.pods: dict[str, Pod] = {}

    def add_pod(
        self, name: str, ipv4: str, ipv6: str | None = None, iface: str | None = None
    ) -> Pod:
        """Create a pod wired as Calico's CNI does it, and nothing more."""
        if name in self.pods:
            raise TopologyError(f"pod {name!r} already exists on {self.name}")
        iface = iface or "cali" + hashlib.sha1(name.encode()).hexdigest()[:11]
        netns = self.topology.new_netns("pod")
        pod = Pod(self.topology, name, netns, node=self, ipv4=ipv4, ipv6=ipv6, iface=iface)
        self.pods[name] = pod
        # The CNI leaves no IPv6 address tentative; nor do we (DAD would cost ~1 s).
        pod.set_sysctls(_NO_DAD)
        self.ip(
            *("link", "add", iface, "address", HOST_VETH_MAC, "type", "veth"),
            *("peer", "name", "eth0", "netns", pod.netns),
        )
        # The pod's IPv6 gateway is this side's link-local, so IPv6 must be on
        # here. The address is assigned explicitly (no autogeneration, no DAD)
        # so it is usable the moment the link is up: nothing to wait for.
        self.set_sysctls(
            {
                f"net.ipv6.conf.{iface}.disable_ipv6": 0,
                f"net.ipv6.conf.{iface}.addr_gen_mode": 1,
            }
        )
        self.ip("addr", "add", f"{HOST_VETH_LL}/64", "dev", iface, "nodad")
        self.ip("link", "set", iface, "up")
        commands = ["link set lo up", "link set eth0 up", f"addr add {ipv4}/32 dev eth0"]
        if ipv6 is not None:
            commands.append(f"addr add {ipv6}/128 dev eth0 nodad")
        commands += [
            "route add 169.254.1.1 dev eth0 scope link",
            "route add default via 169.254.1.1 dev eth0",
        ]
        if ipv6 is not None:
            commands.append(f"route add default via {HOST_VETH_LL} dev eth0")
        pod.ip_batch(*commands)
        return pod

    def wire_pod_manually(self, pod: Pod) -> None:
        """Do the driver's job for ``pod`` (routes, proxy ARP, forwarding).

        Only for this library's self-test: driver tests must leave it to the driver.
        """
        commands = [f"route add {pod.ipv4}/32 dev {pod.iface}"]
        if pod.ipv6 is not None:
            commands.append(f"route add {pod.ipv6}/128 dev {pod.iface}")
        self.ip_batch(*commands)
        self.set_sysctls(
            {
                f"net.ipv4.conf.{pod.iface}.proxy_arp": 1,
                f"net.ipv4.neigh.{pod.iface}.proxy_delay": 0,
                f"net.ipv4.conf.{pod.iface}.forwarding": 1,
                f"net.ipv6.conf.{pod.iface}.forwarding": 1,
            }
        )


_NO_DAD = {"net.ipv6.conf.all.accept_dad": 0, "net.ipv6.conf.default.accept_dad": 0}


class Topology:
    """Owns a set of namespaces and deletes them all on exit."""

    def __init__(self) -> None:
        # Fixed-width fields keep prefixes prefix-free: dpt<pid:4><topology:2>.
        # The topology id may wrap: a prefix is only reused long after close().
        self.prefix = f"dpt{os.getpid() % 10000:04d}{next(_topology_ids) % 256:02x}"
        self.nodes: list[Node] = []
        self._namespaces: list[Namespace] = []
        self._netns_names: list[str] = []
        self._counter = itertools.count()

    def __enter__(self) -> Topology:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def external(self) -> External:
        """The first node's external host (its own, or its underlay's client)."""
        if not self.nodes:
            raise TopologyError("no node yet: call add_node() first")
        return self.nodes[0].external

    def new_netns(self, role: str) -> str:
        """Create an empty namespace owned by this topology; returns its name."""
        index = next(self._counter)
        if index > 0xFF:
            raise TopologyError("at most 256 namespaces per topology (fixed-width names)")
        netns = f"{self.prefix}{index:02x}{role[:3]}"
        _run(["ip", "netns", "add", netns])
        self._netns_names.append(netns)
        return netns

    def delete_netns(self, netns: str) -> None:
        """Delete one namespace of this topology now, rather than at close()."""
        if netns not in self._netns_names:
            raise TopologyError(f"{netns} is not a namespace of this topology")
        _destroy_netns(netns, check=True)
        self._netns_names.remove(netns)

    def add_veths(
        self, netns: str, pairs: Sequence[tuple[str, str]], peer_netns: str | None = None
    ) -> None:
        """Many veth pairs at once, all up: one ``ip -batch`` per namespace.

        The first name of each pair stays in ``netns``; the second goes to
        ``peer_netns`` (as a pod's eth0 would) or stays too. For nodes with
        thousands of interfaces, where ``add_pod``'s full wiring is too slow.
        A dummy link would be cheaper, but many kernels (this CI's among
        them) are built without the dummy driver; veth is always there.
        """
        for name in (netns, peer_netns):
            if name is not None and name not in self._netns_names:
                raise TopologyError(f"{name} is not a namespace of this topology")
        where = f" netns {peer_netns}" if peer_netns else ""
        lines = [f"link add {host} type veth peer name {peer}{where}" for host, peer in pairs]
        lines += [f"link set {host} up" for host, _ in pairs]
        peers = "".join(f"link set {peer} up\n" for _, peer in pairs)
        # A thousand pairs take a few seconds; allow far more than that.
        timeout = COMMAND_TIMEOUT + len(pairs) / 10
        batch = "".join(f"{x}\n" for x in lines)
        _run(["ip", "-n", netns, "-batch", "-"], stdin=batch, timeout=timeout)
        _run(["ip", "-n", peer_netns or netns, "-batch", "-"], stdin=peers, timeout=timeout)

    def adopt(self, ns: Namespace) -> None:
        """Count ``ns`` (made from :meth:`new_netns`) among ours: close() stops its agent."""
        if ns.netns not in self._netns_names:
            raise TopologyError(f"{ns.netns} is not a namespace of this topology")
        self._namespaces.append(ns)
        if isinstance(ns, Node):
            self.nodes.append(ns)

    def add_node(self, name: str = "node") -> Node:
        """A node namespace plus its external host, joined by the uplink veth."""
        (v4_node, v4_ext, v4_len), (v6_node, v6_ext, v6_len) = NODE_UPLINK[4], NODE_UPLINK[6]
        external = External(self, f"{name}-external", self.new_netns("ext"), {4: v4_ext, 6: v6_ext})
        node = Node(self, name, self.new_netns("nod"), external, {4: v4_node, 6: v6_node})
        self.adopt(external)
        self.adopt(node)
        node.set_sysctls({**_NO_DAD, "net.ipv4.ip_forward": 1, "net.ipv6.conf.all.forwarding": 1})
        external.set_sysctls(_NO_DAD)
        node.ip(
            "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", external.netns
        )
        node.ip_batch(
            "link set lo up",
            "link set eth0 up",
            f"addr add {v4_node}/{v4_len} dev eth0",
            f"addr add {v6_node}/{v6_len} dev eth0 nodad",
            f"route add default via {v4_ext}",
            f"route add default via {v6_ext}",
        )
        external.ip_batch(
            "link set lo up",
            "link set eth0 up",
            f"addr add {v4_ext}/{v4_len} dev eth0",
            f"addr add {v6_ext}/{v6_len} dev eth0 nodad",
            f"route add {POD_CIDR_V4} via {v4_node}",
            f"route add {POD_CIDR_V6} via {v6_node}",
        )
        return node

    def run(
        self, ns: Namespace | str, *argv: str, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside a namespace (object or netns name)."""
        netns = ns if isinstance(ns, str) else ns.netns
        return _run(["ip", "netns", "exec", netns, *argv], check=check, stdin=stdin)

    def namespaces(self) -> list[Namespace]:
        pods = [pod for node in self.nodes for pod in node.pods.values()]
        return [*self._namespaces, *pods]

    def leftovers(self) -> list[str]:
        """Namespaces carrying this topology's prefix that still exist."""
        return [ns for ns in list_netns() if ns.startswith(self.prefix)]

    def close(self) -> None:
        """Stop agents, kill everything inside, delete every namespace. Idempotent."""
        errors: list[str] = []
        for ns in self.namespaces():
            try:
                ns.agent.stop()
            except (OSError, subprocess.SubprocessError) as exc:
                errors.append(f"stopping agent in {ns.netns}: {exc}")
        # Also sweep anything with our prefix that the bookkeeping missed.
        for netns in dict.fromkeys([*reversed(self._netns_names), *self.leftovers()]):
            try:
                _destroy_netns(netns, check=False)
            except (OSError, subprocess.SubprocessError) as exc:
                errors.append(f"deleting {netns}: {exc}")
        self.nodes.clear()
        self._namespaces.clear()
        self._netns_names.clear()
        remaining = self.leftovers()
        if errors or remaining:
            raise TopologyError(f"cleanup incomplete: {errors}, still present: {remaining}")


def _destroy_netns(netns: str, *, check: bool) -> None:
    """Kill everything running in ``netns``, then delete it."""
    for pid in _run(["ip", "netns", "pids", netns], check=False).stdout.split():
        _kill(int(pid))
    _run(["ip", "netns", "del", netns], check=check)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)


def connectivity_matrix(
    sources: Sequence[Namespace],
    targets: Sequence[Namespace],
    proto: Proto,
    port: int,
    *,
    family: Family = 4,
    timeout: float = 0.5,
) -> dict[tuple[str, str], bool]:
    """Probe every (source, target) pair at once; a denied pair costs one timeout.

    All probes run concurrently (agents serve requests in parallel), so the
    whole matrix takes about one ``timeout`` however large it is.
    """
    pairs = [(src, dst) for src in sources for dst in targets]
    with ThreadPoolExecutor(max_workers=max(len(pairs), 1)) as pool:
        results = pool.map(
            lambda pair: pair[0].can_connect(proto, pair[1].address(family), port, timeout), pairs
        )
        return {(src.name, dst.name): ok for (src, dst), ok in zip(pairs, results, strict=True)}
