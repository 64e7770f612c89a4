"""Services on a simulated Windows node: the Felix messages and the host they run on.

The node is the policy scenario's (``tests/kernel/scenario.py``): its pods
have local HNS endpoints on the ``Calico`` network. Other nodes' pods are
backends too: ``node-b`` is reached over VXLAN at :data:`NODE_B_ADDRESS`
(its VTEP), so their remote endpoints carry that provider address.
"""

from __future__ import annotations

from google.protobuf.message import Message

from dataplane.windows.hns.hcn import HnsVersion
from dataplane.windows.sim.simhost import NEWEST, SimHost
from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.hns import calico_host
from tests.kernel import scenario as sc

NODE_B = "node-b"
NODE_B_ADDRESS = "192.168.1.12"
SOURCE_VIPS = "10.65.0.2,fd00:10:65::2"
HTTP = [pb.ServicePort(Protocol="TCP", Port=80, name="http")]
LOCAL_V4 = [p.ipv4 for p in sc.PODS[:3]]  # web-1, web-2, api-1
REMOTE_V4 = ["10.65.2.7", "10.65.2.8", "10.65.2.9"]  # pods on node-b


def overlay_host(version: HnsVersion = NEWEST, **kwargs: object) -> SimHost:
    return calico_host(sc.PODS, version, network_type="Overlay", **kwargs)  # type: ignore[arg-type]


def service(name: str = "web", **kwargs: object) -> pb.ServiceUpdate:
    base: dict[str, object] = {
        "name": name,
        "namespace": "prod",
        "type": "ClusterIP",
        "cluster_ips": ["10.96.0.10"],
        "ports": HTTP,
    }
    base.update(kwargs)
    return pb.ServiceUpdate(**base)  # type: ignore[arg-type]


def backend(
    address: str,
    *,
    port: int = 8080,
    name: str = "http",
    protocol: str = "TCP",
    state: int = 0,
    local: bool | None = None,
) -> pb.ServiceBackend:
    """A backend: on this node if the scenario has a pod with ``address``, else on node-b."""
    if local is None:
        local = any(address in (p.ipv4, p.ipv6) for p in sc.PODS)
    return pb.ServiceBackend(
        addresses=[address],
        ports=[pb.ServiceBackendPort(name=name, protocol=protocol, port=port)],
        local=local,
        node_name="" if local else NODE_B,
        state=state,  # type: ignore[arg-type]
    )


def backends(name: str, *items: pb.ServiceBackend | str) -> pb.ServiceBackendsUpdate:
    return pb.ServiceBackendsUpdate(
        name=name,
        namespace="prod",
        backends=[backend(i) if isinstance(i, str) else i for i in items],
    )


def node_b(address: str = NODE_B_ADDRESS) -> pb.VXLANTunnelEndpointUpdate:
    """node-b's VTEP, its VXLAN packets going to ``address``."""
    return pb.VXLANTunnelEndpointUpdate(
        node=NODE_B,
        mac="66:00:00:00:00:0b",
        ipv4_addr="10.65.2.0",
        parent_device_ip=address,
        mac_v6="66:00:00:00:01:0b",
        ipv6_addr="fd00:10:65::2:0",
        parent_device_ipv6="fd00:192:168:1::12",
    )


def messages(*services: Message, **config: str) -> list[Message]:
    """The node's start-up messages (pods, no policies), node-b's VTEP, then ``services``."""
    config = {"WindowsServiceSourceVIP": SOURCE_VIPS, "FelixHostname": "node-a", **config}
    extra: list[Message] = [node_b(), *services]
    return sc.node_messages(
        {p.name: p.iface for p in sc.PODS}, with_policies=False, extra=extra, **config
    )
