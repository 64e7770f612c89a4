"""Two nodes on an underlay, two pods each, each node driven by its own driver process.

The nodes learn of each other only through Felix's messages
(:mod:`tests.kernel.overlay_messages`); the underlay routes no pod address,
so pods on different nodes talk only if the drivers build the overlay.
"""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.message import Message

from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.node import allow_all_profile, workload_update
from testbed.topology import Node, Pod, Topology
from testbed.underlay import Underlay
from tests.felix_harness import FelixHarness
from tests.kernel.overlay_messages import OverlayNode, VxlanMode, overlay_messages, overlay_node

PROFILE = "kns.overlay"
TCP_PORT, UDP_PORT = 80, 53


class OverlayCluster:
    def __init__(self, topology: Topology, mode: VxlanMode = "Always", *, one_subnet: bool = False):
        self.topology = topology
        self.mode = mode
        self.underlay = Underlay(topology)
        first = self.underlay.add_subnet(101)
        second = first if one_subnet else self.underlay.add_subnet(102)
        self.nodes: dict[str, Node] = {
            "node-a": self.underlay.add_node("node-a", first),
            "node-b": self.underlay.add_node("node-b", second),
        }
        self.specs: dict[str, OverlayNode] = {
            name: overlay_node(
                name, number, self.underlay.cidr(node, 4), self.underlay.cidr(node, 6)
            )
            for number, (name, node) in enumerate(self.nodes.items(), start=1)
        }
        self.pods: dict[str, Pod] = {}
        for name, node in self.nodes.items():
            spec = self.specs[name]
            for i in (1, 2):
                pod_name = f"{name[-1]}{i}"
                pod = node.add_pod(
                    pod_name, spec.pod_address(4, 10 + i), spec.pod_address(6, 10 + i)
                )
                pod.listen("tcp", TCP_PORT)
                pod.listen("udp", UDP_PORT)
                self.pods[pod_name] = pod
        self.drivers: dict[str, FelixHarness] = {}

    def pods_of(self, node: str) -> list[Pod]:
        return [p for p in self.pods.values() if p.node is self.nodes[node]]

    def endpoint(self, pod: Pod, tiers: Sequence[pb.TierInfo] = ()) -> pb.WorkloadEndpointUpdate:
        assert pod.ipv6 is not None
        return workload_update(
            f"overlay/{pod.name}",
            pod.iface,
            ipv4=[pod.ipv4],
            ipv6=[pod.ipv6],
            profiles=[PROFILE],
            tiers=tiers,
        )

    def messages(self, node: str, *extra: Message, **config: str) -> list[Message]:
        """Node ``node``'s start-up: the overlay, its pods, ``extra``, then InSync."""
        local = self.pods_of(node)
        addresses = [a for p in local for a in (p.ipv4, p.ipv6) if a]
        msgs = overlay_messages(
            list(self.specs.values()), node, self.mode, local_pods=addresses, **config
        )
        endpoints: list[Message] = [allow_all_profile(PROFILE), *map(self.endpoint, local)]
        return [*msgs[:-1], *endpoints, *extra, msgs[-1]]

    def start(self, node: str, *extra: Message, **config: str) -> FelixHarness:
        """Start ``node``'s driver; ``extra`` go before InSync, so they are in place on return."""
        felix = FelixHarness("--platform", "linux", netns=self.nodes[node].netns)
        felix.send(*self.messages(node, *extra, **config))
        felix.recv_until("dataplane_in_sync", timeout=60)
        self.drivers[node] = felix
        return felix

    def start_all(self, **config: str) -> None:
        for name in self.nodes:
            self.start(name, **config)

    def stop_all(self) -> None:
        for felix in self.drivers.values():
            felix.kill()
        self.drivers.clear()
