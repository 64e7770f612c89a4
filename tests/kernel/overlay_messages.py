"""What Felix tells one node about a VXLAN cluster: pools, hosts, VTEPs, routes.

Given every node (its underlay addresses with their subnet lengths, its VTEP
and its IPAM blocks) and the pool's ``vxlanMode``, :func:`cluster_messages`
builds the messages Felix's calculation graph sends to the node named
``local``, field for field as upstream fills them:

* ``IPAMPoolUpdate`` per family, with Felix's id (the CIDR, ``/`` made
  ``-``) and its modes as its v1 data model spells them (``always``,
  ``cross-subnet``; ``""`` is Never);
* ``HostMetadataUpdate`` per node, both addresses in CIDR form (as current
  upstream sends it; the V4V6 variant is older releases');
* ``VXLANTunnelEndpointUpdate`` per node (``vxlan_resolver.go``): the
  tunnel address and MAC per family, the parent device's plain address;
* ``RouteUpdate`` as ``l3_route_resolver.go``'s ``flush()`` computes them:
  the pool (``CIDR_INFO``), each block (``LOCAL_``/``REMOTE_WORKLOAD``), each
  tunnel address (``LOCAL_``/``REMOTE_TUNNEL`` with tunnel type VXLAN: a /32
  inside a /26 block does not inherit the block's workload type), each host
  address (``LOCAL_``/``REMOTE_HOST``, in no pool) and, for the local node
  only (Felix's default route source, ``CalicoIPAM``, sees local endpoints
  only), each local pod's address (``LOCAL_WORKLOAD`` with ``local_workload``).
  Every route with a destination node carries that node's address in the
  route's family; ``same_subnet`` is set when the pool is CrossSubnet and
  the destination node's address lies in the local node's subnet, the
  local node included (it lies in its own subnet);
* ``Encapsulation``, VXLAN on for each family that has a VXLAN pool.

They come in the order of Felix's ``EventSequencer.Flush``: VTEPs before the
routes through them, then hosts, pools and the encapsulation. Felix emits
routes in map order; here they are sorted by kind and node, so runs are
reproducible. :func:`overlay_messages` wraps them with the ``ConfigUpdate``
(the kernel scenario's defaults plus :func:`overlay_config`) and ``InSync``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from google.protobuf.message import Message

from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.topology import POD_CIDR_V4, POD_CIDR_V6, Family
from tests.kernel import scenario

__all__ = [
    "POOL_V4",
    "POOL_V6",
    "OverlayNode",
    "VxlanMode",
    "cluster_messages",
    "overlay_config",
    "overlay_messages",
    "overlay_node",
    "pool_id",
]

VxlanMode = Literal["Always", "CrossSubnet"]

# testbed.topology's pod CIDRs: the one pool per family.
POOL_V4 = POD_CIDR_V4
POOL_V6 = POD_CIDR_V6
VXLAN_VNI = 4096  # Felix's default VXLANVNI
VXLAN_PORT = 4789  # Felix's default VXLANPort
# Calico's defaults for natOutgoing on the pools it creates (CALICO_IPV4POOL_
# NAT_OUTGOING on, CALICO_IPV6POOL_NAT_OUTGOING off), as tests/kernel/scenario
# has them.
NAT_OUTGOING: Mapping[int, bool] = {4: True, 6: False}
# The v3 API's modes as libcalico-go's v1 model (encap.Mode) spells them on the wire.
_WIRE_MODE: Mapping[str, str] = {"Always": "always", "CrossSubnet": "cross-subnet"}
_FAMILIES: tuple[Family, ...] = (4, 6)


@dataclass(frozen=True)
class OverlayNode:
    """One node as the rest of the cluster sees it.

    Attributes:
        name: the node's (and its Felix's) hostname.
        ipv4, ipv6: the underlay address with its subnet length ("192.168.101.2/24").
        tunnel_v4, tunnel_v6: the VXLAN devices' own addresses (no length).
        mac_v4, mac_v6: the VXLAN devices' MACs.
        blocks_v4, blocks_v6: the IPAM blocks affine to the node.
    """

    name: str
    ipv4: str
    ipv6: str
    tunnel_v4: str
    tunnel_v6: str
    mac_v4: str
    mac_v6: str
    blocks_v4: tuple[str, ...]
    blocks_v6: tuple[str, ...]

    def address(self, family: Family) -> str:
        """The underlay address, without its length."""
        return (self.ipv4 if family == 4 else self.ipv6).partition("/")[0]

    def cidr(self, family: Family) -> str:
        return self.ipv4 if family == 4 else self.ipv6

    def subnet(self, family: Family) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_interface(self.cidr(family)).network

    def tunnel(self, family: Family) -> str:
        return self.tunnel_v4 if family == 4 else self.tunnel_v6

    def mac(self, family: Family) -> str:
        return self.mac_v4 if family == 4 else self.mac_v6

    def blocks(self, family: Family) -> tuple[str, ...]:
        return self.blocks_v4 if family == 4 else self.blocks_v6

    def pod_address(self, family: Family, number: int) -> str:
        """Address ``number`` of the node's first block (0 is the tunnel's)."""
        network = ipaddress.ip_network(self.blocks(family)[0])
        if not 0 < number < network.num_addresses:
            raise ValueError(f"{number} is not a pod address in {network}")
        return str(network[number])


def overlay_node(name: str, number: int, ipv4: str, ipv6: str) -> OverlayNode:
    """Node ``number`` (1..255) of the cluster, with its block and VTEP derived from it.

    Its blocks are ``10.65.<number>.0/26`` and ``fd00:10:65:<number hex>::/122``;
    its tunnel addresses are their first addresses, as Calico's IPAM hands the
    tunnel the first free address of the node's first block; its MACs are
    locally administered and end in the number, then 04 (v4) or 06 (v6).
    """
    if not 0 < number < 256:
        raise ValueError(f"node number {number}: must be 1..255")
    return OverlayNode(
        name=name,
        ipv4=ipv4,
        ipv6=ipv6,
        tunnel_v4=f"10.65.{number}.0",
        tunnel_v6=f"fd00:10:65:{number:x}::",
        mac_v4=f"66:00:00:00:{number:02x}:04",
        mac_v6=f"66:00:00:00:{number:02x}:06",
        blocks_v4=(f"10.65.{number}.0/26",),
        blocks_v6=(f"fd00:10:65:{number:x}::/122",),
    )


def pool_id(cidr: str) -> str:
    """Felix's id for a pool (``cidrToIPPoolID``): its CIDR with the ``/`` made ``-``."""
    return cidr.replace("/", "-", 1)


def overlay_config(local: str, **overrides: str) -> dict[str, str]:
    """The config keys an overlay node's Felix sends beyond the scenario's defaults."""
    return {
        "FelixHostname": local,
        "VXLANVNI": str(VXLAN_VNI),
        "VXLANPort": str(VXLAN_PORT),
        **overrides,
    }


def overlay_messages(
    nodes: Sequence[OverlayNode],
    local: str,
    vxlan_mode: VxlanMode = "Always",
    *,
    local_pods: Iterable[str] = (),
    **config_overrides: str,
) -> list[Message]:
    """Config, the cluster's messages and InSync: a whole start-up for node ``local``."""
    return [
        scenario.config(**overlay_config(local, **config_overrides)),
        *cluster_messages(nodes, local, vxlan_mode, local_pods=local_pods),
        pb.InSync(),
    ]


def cluster_messages(
    nodes: Sequence[OverlayNode],
    local: str,
    vxlan_mode: VxlanMode = "Always",
    *,
    local_pods: Iterable[str] = (),
) -> list[Message]:
    """Pools, VTEPs, routes, hosts and encapsulation, as Felix sends them to ``local``.

    ``local_pods`` are the addresses of the local node's workload endpoints
    (Felix routes each; remote endpoints are covered by their blocks).
    """
    by_name = {node.name: node for node in nodes}
    if len(by_name) != len(nodes):
        raise ValueError("node names must be unique")
    if local not in by_name:
        raise ValueError(f"the local node {local!r} is not among the nodes")
    routes = _RouteBuilder(by_name, local, cross_subnet=vxlan_mode == "CrossSubnet")
    messages: list[Message] = [_vtep(node) for node in nodes]
    messages += routes.build(local_pods)
    messages += [
        pb.HostMetadataUpdate(
            hostname=node.name,
            ipv4_addr=node.ipv4,
            ipv6_addr=node.ipv6,
            labels={"kubernetes.io/hostname": node.name},
        )
        for node in nodes
    ]
    messages += [
        pb.IPAMPoolUpdate(
            id=pool_id(cidr),
            pool=pb.IPAMPool(
                cidr=cidr,
                masquerade=NAT_OUTGOING[family],
                ipip_mode="",
                vxlan_mode=_WIRE_MODE[vxlan_mode],
            ),
        )
        for family, cidr in ((4, POOL_V4), (6, POOL_V6))
    ]
    messages.append(pb.Encapsulation(vxlan_enabled=True, vxlan_enabled_v6=True))
    return messages


def _vtep(node: OverlayNode) -> pb.VXLANTunnelEndpointUpdate:
    return pb.VXLANTunnelEndpointUpdate(
        node=node.name,
        mac=node.mac_v4,
        ipv4_addr=node.tunnel_v4,
        parent_device_ip=node.address(4),
        mac_v6=node.mac_v6,
        ipv6_addr=node.tunnel_v6,
        parent_device_ipv6=node.address(6),
    )


@dataclass(frozen=True)
class _RouteBuilder:
    """The fields ``flush()`` fills, for the three things a route can lead to."""

    nodes: Mapping[str, OverlayNode]
    local: str
    cross_subnet: bool

    def build(self, local_pods: Iterable[str]) -> list[pb.RouteUpdate]:
        routes = [
            pb.RouteUpdate(
                dst=cidr,
                types=pb.CIDR_INFO,
                ip_pool_type=pb.VXLAN,
                nat_outgoing=NAT_OUTGOING[family],
            )
            for family, cidr in ((4, POOL_V4), (6, POOL_V6))
        ]
        for node in self.nodes.values():
            local = node.name == self.local
            for family in _FAMILIES:
                routes += [
                    self._in_pool(block, node, family, workload=True)
                    for block in node.blocks(family)
                ]
                tunnel = pb.LOCAL_TUNNEL if local else pb.REMOTE_TUNNEL
                routes.append(
                    self._in_pool(
                        _host_cidr(node.tunnel(family)), node, family, types=tunnel, vxlan=True
                    )
                )
                host = pb.LOCAL_HOST if local else pb.REMOTE_HOST
                routes.append(
                    pb.RouteUpdate(
                        dst=_host_cidr(node.address(family)),
                        types=host,
                        ip_pool_type=pb.NONE,
                        dst_node_name=node.name,
                        dst_node_ip=node.address(family),
                    )
                )
        me = self.nodes[self.local]
        for pod in local_pods:
            version: Family = 6 if ":" in pod else 4
            routes.append(
                self._in_pool(_host_cidr(pod), me, version, workload=True, local_workload=True)
            )
        return routes

    def _in_pool(
        self,
        dst: str,
        node: OverlayNode,
        family: Family,
        *,
        workload: bool = False,
        types: int = 0,
        vxlan: bool = False,
        local_workload: bool = False,
    ) -> pb.RouteUpdate:
        """A route inside the pool: it takes the pool's type, NAT and cross-subnet flag."""
        if workload:
            types |= pb.LOCAL_WORKLOAD if node.name == self.local else pb.REMOTE_WORKLOAD
        return pb.RouteUpdate(
            dst=dst,
            types=types,  # type: ignore[arg-type]  # a bitmap of RouteType values
            ip_pool_type=pb.VXLAN,
            dst_node_name=node.name,
            dst_node_ip=node.address(family),
            same_subnet=self.cross_subnet and self._in_our_subnet(node, family),
            nat_outgoing=NAT_OUTGOING[family],
            local_workload=local_workload,
            tunnel_type=pb.TunnelType(vxlan=True) if vxlan else None,
        )

    def _in_our_subnet(self, node: OverlayNode, family: Family) -> bool:
        # nodeInOurSubnet: the local node's subnet holds the node's address.
        ours = self.nodes[self.local].subnet(family)
        return ipaddress.ip_address(node.address(family)) in ours


def _host_cidr(address: str) -> str:
    return f"{address}/{128 if ':' in address else 32}"
