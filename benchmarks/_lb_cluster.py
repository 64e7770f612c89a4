"""The generated cluster of the Windows services benchmark: pods, nodes, services, swaps.

One node under test (``node-a``) and ``remote_nodes`` others, each owning
a /24 of the pod network (10.65.N.0/24, node-a N = 0) and, for the remote
ones, a VTEP at 192.168.1.(10 + N). Pods come from fixed pools,
``local_pods`` on node-a and ``pods_per_node`` on each remote node; each
service draws its backends from the pools at random (seeded, so every run
and every HNS version sees the same cluster): ``round(backends *
remote_share)`` remote, the rest local, no pod twice in one service. A pod
may back several services, as in real clusters, so one remote endpoint
serves every service that names its pod and the number of remote endpoints
is the number of distinct remote pods drawn, not of references.

Every service is a ClusterIP one (one cluster IP from 10.96.0.10 on, TCP
80 to target port 8080): one HNS load balancer each. The swaps change one
service's backends in place, so the next :meth:`Cluster.backends` message
carries them.
"""

from __future__ import annotations

import ipaddress
import random
from collections import Counter
from dataclasses import dataclass

from google.protobuf.message import Message

from dataplane.wire._pb import felixbackend_pb2 as pb

__all__ = [
    "LBS_PER_SERVICE",
    "NODE",
    "SOURCE_VIP",
    "Cluster",
    "Pod",
    "Sizes",
    "Swap",
    "provider_of",
]

NODE = "node-a"
SOURCE_VIP = "10.65.0.2"  # in node-a's block, below its pods (HNS needs one on Overlay)
_FIRST_POD = 10  # pods start at .10 of their node's /24
MAX_PODS = 240  # .10 to .249; .250 is the "new pod" of a remote swap
MAX_NODES = 240  # VTEPs at 192.168.1.11 to .250
_NEW_POD = 250
# HNS has one load balancer per frontend (VIP, protocol, port): one cluster
# IP and one port make one.
LBS_PER_SERVICE = 1
_FIRST_CLUSTER_IP = ipaddress.ip_address("10.96.0.10")
_PORT = pb.ServicePort(Protocol="TCP", Port=80, name="http")
_TARGET = pb.ServiceBackendPort(name="http", protocol="TCP", port=8080)


@dataclass(frozen=True, slots=True)
class Sizes:
    services: int = 2_000
    backends: int = 5  # per service
    remote_share: float = 0.6
    remote_nodes: int = 20
    local_pods: int = 200
    pods_per_node: int = 200  # on each remote node
    seed: int = 1

    @property
    def remote_backends(self) -> int:
        """Remote backends per service; the rest are local."""
        return round(self.backends * self.remote_share)


@dataclass(frozen=True, slots=True, order=True)
class Pod:
    address: str
    node: str

    @property
    def local(self) -> bool:
        return self.node == NODE


def _parent(node: int) -> str:
    """Node ``node``'s own address: its VTEP's, where VXLAN packets to its pods go."""
    return f"192.168.1.{10 + node}"


def provider_of(address: str) -> str:
    """The address VXLAN packets to the pod at ``address`` go to (its node's)."""
    return _parent(int(address.split(".")[2]))


def _pod(node: int, index: int) -> Pod:
    return Pod(f"10.65.{node}.{_FIRST_POD + index}", NODE if node == 0 else f"node-{node}")


@dataclass(frozen=True, slots=True)
class Swap:
    """One backend of service ``service`` replaced by another."""

    service: int
    old: Pod
    new: Pod
    new_appears: bool  # a remote pod no service named: its remote endpoint is made
    old_vanishes: bool  # a remote pod no other service names: its remote endpoint goes


class Cluster:
    def __init__(self, sizes: Sizes) -> None:
        remote = sizes.remote_backends
        if not 0 <= remote <= sizes.backends:
            raise ValueError("remote share must be between 0 and 1")
        if max(sizes.local_pods, sizes.pods_per_node) > MAX_PODS:
            raise ValueError(f"at most {MAX_PODS} pods per node (one /24 each)")
        if not 0 < sizes.remote_nodes <= MAX_NODES:
            raise ValueError(f"between 1 and {MAX_NODES} remote nodes")
        self.sizes = sizes
        self.local_pods = [_pod(0, i) for i in range(sizes.local_pods)]
        self.remote_pods = [
            _pod(n, i) for i in range(sizes.pods_per_node) for n in range(1, sizes.remote_nodes + 1)
        ]
        if sizes.backends - remote > len(self.local_pods) or remote > len(self.remote_pods):
            raise ValueError("the pod pools are smaller than one service's backends")
        rng = random.Random(sizes.seed)
        self.members: list[list[Pod]] = [
            [
                *rng.sample(self.local_pods, sizes.backends - remote),
                *rng.sample(self.remote_pods, remote),
            ]
            for _ in range(sizes.services)
        ]

    # --- counts the floor and kube-proxy's figures come from -------------------------

    def remote_references(self) -> Counter[Pod]:
        """How many services name each remote pod."""
        return Counter(p for pods in self.members for p in pods if not p.local)

    def load_balancers(self) -> int:
        return LBS_PER_SERVICE * len(self.members)

    # --- messages ----------------------------------------------------------------------

    def snapshot(self) -> list[Message]:
        """What Felix sends a starting node: config, remote VTEPs, services, InSync."""
        config = {
            "FelixHostname": NODE,
            "WindowsServiceSourceVIP": SOURCE_VIP,
            # No periodic re-read: at 20 ms a call the first apply takes about
            # the default 90 s, and a refresh landing inside a measured step
            # would end that step early.
            "EndpointRefreshInterval": "0",
        }
        msgs: list[Message] = [pb.ConfigUpdate(config=config)]
        msgs += [_vtep(n) for n in range(1, self.sizes.remote_nodes + 1)]
        for i in range(len(self.members)):
            msgs.append(
                pb.ServiceUpdate(
                    name=self.name(i),
                    namespace="bench",
                    type="ClusterIP",
                    cluster_ips=[self.cluster_ip(i)],
                    ports=[_PORT],
                )
            )
            msgs.append(self.backends(i))
        msgs.append(pb.InSync())
        return msgs

    @staticmethod
    def name(service: int) -> str:
        return f"svc-{service:04d}"

    @staticmethod
    def cluster_ip(service: int) -> str:
        return str(_FIRST_CLUSTER_IP + service)

    def backends(self, service: int) -> pb.ServiceBackendsUpdate:
        """Service ``service``'s full backend list, as it stands."""
        return pb.ServiceBackendsUpdate(
            name=self.name(service),
            namespace="bench",
            backends=[
                pb.ServiceBackend(
                    addresses=[p.address], ports=[_TARGET], local=p.local, node_name=p.node
                )
                for p in self.members[service]
            ],
        )

    # --- swaps -------------------------------------------------------------------------

    def swap_local(self) -> Swap:
        """The first service's first local backend for a local pod it does not use.

        Both pods' endpoints are the CNI's and already on the host: the change
        is the load balancer alone.
        """
        pods = self.members[0]
        old = next(p for p in pods if p.local)
        new = next(p for p in self.local_pods if p not in pods)
        return self._swap(0, old, new)

    def swap_remote(self) -> Swap:
        """A remote backend for a new pod on the same node (its endpoint appears).

        The backend swapped out is, where the draw made one, a pod no other
        service names, so its remote endpoint goes too.
        """
        references = self.remote_references()
        service, old = next(
            (
                (i, p)
                for i, pods in enumerate(self.members)
                for p in pods
                if not p.local and references[p] == 1
            ),
            (0, next(p for p in self.members[0] if not p.local)),
        )
        node = int(old.address.split(".")[2])
        return self._swap(service, old, Pod(f"10.65.{node}.{_NEW_POD}", old.node))

    def _swap(self, service: int, old: Pod, new: Pod) -> Swap:
        references = self.remote_references()
        appears = not new.local and references[new] == 0
        vanishes = not old.local and references[old] == 1
        pods = self.members[service]
        pods[pods.index(old)] = new
        return Swap(service, old, new, appears, vanishes)


def _vtep(node: int) -> pb.VXLANTunnelEndpointUpdate:
    return pb.VXLANTunnelEndpointUpdate(
        node=f"node-{node}",
        mac=f"66:00:00:00:{node >> 8:02x}:{node & 0xFF:02x}",
        ipv4_addr=f"10.65.{node}.0",
        parent_device_ip=_parent(node),
    )
