"""The service frontend a packet hits, and where kube-proxy may send it.

VIPs before node ports, as kube-proxy matches them; the backends of the
packet's family serving the port (on Windows only those on the one
internal port an HNS load balancer has), narrowed by the traffic
policies, or the step that refuses the packet (no backends, no local
backends, a source outside ``loadBalancerSourceRanges``, or ranges HNS
cannot enforce).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Literal

from dataplane.model.services import Service, ServicePort
from dataplane.ops.evaluate import Step, Where
from dataplane.ops.locate import Location
from dataplane.ops.rule_match import Packet, in_any
from dataplane.sim.platform import SimState
from dataplane.windows.services.lb_render import internal_port

__all__ = ["FrontendKind", "ServiceHit", "endpoint_text", "service_backends", "service_frontend"]

FrontendKind = Literal["cluster-ip", "external-ip", "load-balancer-ip", "node-port"]


@dataclass(frozen=True, slots=True)
class ServiceHit:
    """The frontend a packet hit and the backends (``address:port``) it can reach."""

    service: str
    port: ServicePort
    frontend: FrontendKind
    address: str
    backends: tuple[str, ...]

    @property
    def frontend_port(self) -> int:
        return self.port.node_port if self.frontend == "node-port" else self.port.port

    def to_json(self) -> dict[str, object]:
        return {
            "service": self.service,
            "port_name": self.port.name,
            "frontend": self.frontend,
            "address": self.address,
            "port": self.frontend_port,
            "protocol": self.port.protocol,
            "backends": list(self.backends),
        }


def endpoint_text(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def service_frontend(
    state: SimState, packet: Packet, destination: Location
) -> tuple[Service, ServicePort, FrontendKind] | None:
    """The service frontend ``packet`` is addressed to; VIPs before node ports (kube-proxy)."""
    if packet.dst_port is None:
        return None
    services = [s for _, s in sorted(state.services.items()) if s.type != "ExternalName"]
    dst = ipaddress.ip_address(packet.dst)
    for service in services:
        for port in service.ports:
            if port.protocol != packet.protocol or port.port != packet.dst_port:
                continue
            vips: tuple[tuple[FrontendKind, tuple[str, ...]], ...] = (
                ("cluster-ip", service.cluster_ips),
                ("external-ip", service.external_ips),
                ("load-balancer-ip", service.load_balancer_ips),
            )
            for kind, addresses in vips:
                if any(ipaddress.ip_address(a) == dst for a in addresses):
                    return service, port, kind
    if destination.kind != "host":
        return None
    for service in services:
        for port in service.ports:
            if port.protocol == packet.protocol and port.node_port == packet.dst_port:
                return service, port, "node-port"
    return None


def _targets(
    service: Service, port: ServicePort, version: int, *, local_only: bool, windows: bool
) -> list[str]:
    """Backends of this family serving ``port``, as ``address:port``.

    On Windows only those on the target port number most backends use: an
    HNS load balancer has one internal port (the platform leaves the
    others out and logs it).
    """
    family = [
        b
        for b in service.usable(local_only=local_only)
        if ipaddress.ip_address(b.address).version == version
    ]
    if windows:
        number, family, _ = internal_port(port, family)
        return [endpoint_text(b.address, number) for b in family]
    out = []
    for backend in family:
        target = backend.port_for(port)
        if target is not None:
            out.append(endpoint_text(backend.address, target))
    return out


def service_backends(
    state: SimState,
    packet: Packet,
    source: Location,
    frontend: tuple[Service, ServicePort, FrontendKind],
    *,
    windows: bool,
) -> tuple[list[str], Step | None]:
    """Where kube-proxy may send ``packet``, or the step refusing it (service_render.py)."""
    service, port, kind = frontend
    v = packet.version
    everyone = _targets(service, port, v, local_only=False, windows=windows)
    if kind == "cluster-ip":
        internal = (
            _targets(service, port, v, local_only=True, windows=windows)
            if service.internal_local
            else everyone
        )
        return internal, None if internal else _refused("no-backends")
    ranges = [r for r in service.source_ranges if ipaddress.ip_network(r).version == v]
    gated = kind == "load-balancer-ip" and service.source_ranges
    if gated and windows:
        return [], _refused("unenforceable")
    if gated and (everyone or service.external_local) and not in_any(packet.src, ranges):
        return [], _refused("source-range")
    # Local policy: pods and the node itself reach every backend; the
    # outside world only this node's.
    pools = [pool.cidr for pool in state.ip_pools.values()]
    inside = source.kind == "host" or in_any(packet.src, pools)
    if service.external_local and not inside:
        local = _targets(service, port, v, local_only=True, windows=windows)
        return local, None if local else _refused("no-local-backends")
    return everyone, None if everyone else _refused("no-backends")


_REFUSALS = {
    "no-backends": "no backend to send it to: refused (kube-proxy's reject)",
    "no-local-backends": "externalTrafficPolicy Local and no backend on this node: dropped",
    "source-range": "source not in loadBalancerSourceRanges: dropped",
    "unenforceable": "loadBalancerSourceRanges cannot be enforced by an HNS load balancer:"
    " this frontend is not programmed (it fails closed)",
}


def _refused(
    label: Literal["no-backends", "no-local-backends", "source-range", "unenforceable"],
) -> Step:
    return Step(label, Where("service", rule=label), "deny", _REFUSALS[label])
