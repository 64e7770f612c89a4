"""Where a connection to a service goes on a host: its HNS load balancers, from the host's state.

Answers "which backends can receive a connection to VIP:port, and on which
port" from any dump in the simulated host's file format (``{"Networks",
"Endpoints", "LoadBalancers", ...}``, :meth:`SimHost.snapshot
<dataplane.windows.sim.simhost.SimHost.snapshot>`): a test's host, or a real
node's state captured to see what the service driver programmed, as
:mod:`dataplane.windows.sim.verdict` does for ACLs.

A load balancer's port mapping matches a connection to ``dst:port`` when
the protocol number and ``ExternalPort`` are equal and ``dst`` is one of
its ``FrontendVIPs``; a load balancer without VIPs (a node port) matches
when ``dst`` is one of the node's addresses, of the family its IPv6 flag
says. The simulated host lets no two load balancers share a frontend, so
at most one VIP matches. Where frontends overlap anyway, the most specific
answers: a VIP before a node port, and of two node ports that differ only
in ``LocalRoutedVIP`` (which also opens the port to the host itself) the
one without it -- this is the view of a connection from off the host.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from dataplane.windows.hns.hcn import (
    ENDPOINT_REMOTE,
    LB_DSR,
    LB_IPV6,
    LB_PROTOCOLS,
    PM_LOCAL_ROUTED_VIP,
    PM_VIP_EXTERNAL_IP,
    Json,
)

__all__ = ["ServiceRoute", "Target", "backend_addresses", "service_route"]


@dataclass(frozen=True, slots=True)
class Target:
    """One backend: where the load balancer sends the connection, and what holds it."""

    address: str
    port: int
    endpoint_id: str
    remote: bool  # an endpoint for a pod on another node
    provider_address: str | None  # that node's address, on an overlay network


@dataclass(frozen=True, slots=True)
class ServiceRoute:
    """The load balancer a connection hits and what it does with it."""

    load_balancer: str
    backends: tuple[Target, ...]
    affinity: bool  # DistributionType != 0: a client keeps its backend
    preserves_client: bool  # DSR: backends see the client's address and answer it directly
    external: bool  # VipExternalIP: the VIP is a service's external IP


def service_route(
    host: Json, dst: str, protocol: str, port: int, *, node_addresses: tuple[str, ...] = ()
) -> ServiceRoute | None:
    """The route of a ``protocol`` connection to ``dst:port``; None if nothing balances it.

    ``protocol`` is ``"tcp"``, ``"udp"`` or ``"sctp"``; ``node_addresses`` are
    the node's own addresses, where node ports listen. A backend whose
    endpoint is gone, or has no address of ``dst``'s family, is left out.
    """
    number = LB_PROTOCOLS.get(protocol.lower())
    if number is None:
        raise ValueError(f"protocol {protocol!r} is not tcp, udp or sctp")
    target = ipaddress.ip_address(dst)
    on_node = target in {ipaddress.ip_address(a) for a in node_addresses}
    found: list[tuple[int, str, Json, Json]] = []
    for lb in host.get("LoadBalancers") or ():
        vips = set(_addresses(lb.get("FrontendVIPs") or ()))
        ipv6 = bool(_int(lb.get("Flags")) & LB_IPV6)
        for mapping in lb.get("PortMappings") or ():
            if _int(mapping.get("Protocol")) != number or _int(mapping.get("ExternalPort")) != port:
                continue
            if vips:
                rank = 0 if target in vips else -1
            elif on_node and (target.version == 6) == ipv6:
                rank = 2 if _int(mapping.get("Flags")) & PM_LOCAL_ROUTED_VIP else 1
            else:
                rank = -1
            if rank >= 0:
                found.append((rank, str(lb.get("ID", "")), lb, mapping))
    if not found:
        return None
    _, lb_id, lb, mapping = min(found, key=lambda f: (f[0], f[1]))
    internal = _int(mapping.get("InternalPort")) or port
    return ServiceRoute(
        load_balancer=lb_id,
        backends=_backends(host, lb, target.version, internal),
        affinity=_int(mapping.get("DistributionType")) != 0,
        preserves_client=bool(_int(lb.get("Flags")) & LB_DSR),
        external=bool(_int(mapping.get("Flags")) & PM_VIP_EXTERNAL_IP),
    )


def backend_addresses(route: ServiceRoute) -> set[tuple[str, int]]:
    """The (address, port) pairs a connection on ``route`` may reach."""
    return {(t.address, t.port) for t in route.backends}


def _backends(host: Json, lb: Json, family: int, port: int) -> tuple[Target, ...]:
    endpoints = {_id(ep.get("ID")): ep for ep in host.get("Endpoints") or ()}
    targets = []
    for member in dict.fromkeys(_id(m) for m in lb.get("HostComputeEndpoints") or ()):
        ep = endpoints.get(member)
        if ep is None:
            continue  # gone from the host: it can receive nothing
        configs = [c.get("IpAddress") for c in ep.get("IpConfigurations") or ()]
        address = next((a for a in _addresses(configs) if a.version == family), None)
        if address is None:
            continue
        targets.append(
            Target(
                address=str(address),
                port=port,
                endpoint_id=str(ep.get("ID")),
                remote=bool(_int(ep.get("Flags")) & ENDPOINT_REMOTE),
                provider_address=_provider_address(ep),
            )
        )
    return tuple(targets)


def _provider_address(endpoint: Json) -> str | None:
    for policy in endpoint.get("Policies") or ():
        if policy.get("Type") == "ProviderAddress":
            address = (policy.get("Settings") or {}).get("ProviderAddress")
            return str(address) if address else None
    return None


def _addresses(texts: Iterable[object]) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The valid addresses among ``texts``, in order; a dump may hold anything."""
    found = []
    for text in texts:
        try:
            found.append(ipaddress.ip_address(str(text)))
        except ValueError:
            continue
    return found


def _int(value: object) -> int:
    """A numeric field hcsshim marshals with omitempty: absent (or not a number) is 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _id(value: object) -> str:
    """HNS ids compare case-insensitively, braces or not."""
    return str(value or "").strip("{}").upper()
