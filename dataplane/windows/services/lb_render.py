"""One service -> the HNS load balancers it needs, after kube-proxy's winkernel mapping. Pure.

HNS balances with ``HostComputeLoadBalancer`` objects: frontend VIPs, one
port mapping (protocol, external port -> internal port), the backends'
HNS endpoint ids, a source VIP and flags. kube-proxy on Windows makes one
per frontend and port, and so does this renderer, keyed by
:class:`LbKey` (protocol, frontend VIP or "" for a node port, port,
family):

==================  =============================================================
frontend            HNS load balancer
==================  =============================================================
cluster IP          ``FrontendVIPs`` [ip]; ``Flags`` DSR when configured
                    (``WindowsServiceDSR``); backends: all, or local ones for
                    internalTrafficPolicy Local
node port           no VIP; port flags ``LocalRoutedVIP`` | ``VipExternalIP``
external IP,        ``FrontendVIPs`` [ip]; port flag ``VipExternalIP``
load-balancer IP
==================  =============================================================

On the last three, externalTrafficPolicy Local means local backends only
and ``Flags`` DSR: only Direct Server Return keeps the client's address.
IPv6 frontends carry the ``IPv6`` flag; ClientIP affinity is distribution
``SourceIP``; ``SourceVIP`` is the configured one of the frontend's family
(``WindowsServiceSourceVIP``, winkernel's ``--source-vip``).

Backends are the service's usable ones (active, else terminating; never
quarantined). HNS has one ``InternalPort`` per mapping, so a named target
port served on different numbers uses the number most usable backends
share and leaves the others out. A frontend with no usable backend gets no
load balancer (HNS refuses an empty one). Each such loss, and every field
HNS cannot express, is a :class:`Note` for the log and the dump: nothing
is dropped silently.

The rendered :class:`WantedLb` names backends by address; the programmer
turns them into HNS endpoint ids (the CNI's local endpoints, its own remote
ones) when it writes (:func:`load_balancer_json`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dataplane.model.services import DEFAULT_AFFINITY_TIMEOUT, Backend, Service, ServicePort
from dataplane.windows.hns.hcn import (
    DISTRIBUTION_SOURCE_IP,
    LB_DSR,
    LB_IPV6,
    LB_PROTOCOLS,
    PM_LOCAL_ROUTED_VIP,
    PM_VIP_EXTERNAL_IP,
    Json,
)

__all__ = [
    "CLASH",
    "NO_SOURCE_VIP",
    "SOURCE_RANGES",
    "LbBackend",
    "LbKey",
    "LbOptions",
    "Note",
    "RenderedLbs",
    "WantedLb",
    "internal_port",
    "load_balancer_json",
    "render_service",
]

SCHEMA = {"Major": 2, "Minor": 0}


def _family(address: str) -> int:
    return 6 if ":" in address else 4


@dataclass(frozen=True, slots=True, order=True)
class LbKey:
    """What makes a load balancer unique on a host: its frontend."""

    protocol: str  # tcp, udp or sctp
    vip: str  # "" for a node port (every node address)
    port: int  # the external port: the service port, or the node port
    family: int

    def __str__(self) -> str:
        where = f"[{self.vip}]" if self.family == 6 and self.vip else self.vip
        return f"{self.protocol} {where or f'node port (IPv{self.family})'}:{self.port}"


@dataclass(frozen=True, slots=True, order=True)
class LbBackend:
    address: str
    local: bool
    node: str  # the node it runs on ("" if unknown): where a remote one is reached


@dataclass(frozen=True, slots=True)
class WantedLb:
    """A load balancer as wanted, backends by address (their HNS ids come at write time)."""

    key: LbKey
    service: str
    internal_port: int
    backends: tuple[LbBackend, ...]  # sorted
    distribution: int
    port_flags: int
    flags: int
    source_vip: str


NO_SOURCE_VIP = "no source VIP"
CLASH = "frontend clash"
SOURCE_RANGES = "source ranges not enforceable"


@dataclass(frozen=True, slots=True, order=True)
class Note:
    """Something of a service HNS does not do as asked; logged once and shown in the dump.

    ``problem``: a frontend not programmed at all for a reason the operator
    must fix (:data:`NO_SOURCE_VIP` on an Overlay network, :data:`CLASH`: a
    frontend another service holds, :data:`SOURCE_RANGES`: a filter HNS
    cannot enforce); the service then reports ``error`` and the node is not
    ready. "": programmed, perhaps not quite as asked.
    """

    service: str
    text: str
    problem: str = ""

    def __str__(self) -> str:
        return f"service {self.service}: {self.text}"


@dataclass(frozen=True, slots=True)
class LbOptions:
    """What the node's configuration and HNS version allow."""

    source_vips: tuple[str, ...] = ()
    dsr: bool = False  # Direct Server Return for cluster IPs
    dsr_supported: bool = True
    affinity_supported: bool = True
    families: tuple[int, ...] = (4, 6)  # the families this host can balance
    source_vip_required: bool = False  # an Overlay network: HNS needs a SourceVIP

    def source_vip(self, family: int) -> str:
        return next((v for v in self.source_vips if _family(v) == family), "")


@dataclass(frozen=True, slots=True)
class RenderedLbs:
    balancers: tuple[WantedLb, ...] = ()
    notes: tuple[Note, ...] = ()


def internal_port(
    port: ServicePort, backends: Iterable[Backend]
) -> tuple[int, list[Backend], list[Backend]]:
    """The one target port number to use, the backends serving it, those left out.

    An HNS load balancer has one internal port per port mapping, so
    backends serving a service port on another number cannot be in it
    (``explain`` says the same of a Windows node).
    """
    serving = [(b, n) for b in backends if (n := b.port_for(port)) is not None]
    if not serving:
        return 0, [], []
    counts = Counter(n for _, n in serving)
    best = max(counts, key=lambda n: (counts[n], -n))  # most shared; then the lowest
    return (
        best,
        [b for b, n in serving if n == best],
        [b for b, n in serving if n != best],
    )


class _Renderer:
    def __init__(self, service: Service, options: LbOptions) -> None:
        self.service = service
        self.options = options
        self.name = str(service.key)
        self.balancers: dict[LbKey, WantedLb] = {}
        self.notes: list[Note] = []

    def note(self, text: str) -> None:
        self.notes.append(Note(self.name, text))

    def add(
        self,
        key: LbKey,
        port: ServicePort,
        backends: Sequence[Backend],
        port_flags: int,
        dsr: bool,
    ) -> None:
        options = self.options
        if key.family not in options.families:
            self.note(f"{key}: not programmed: IPv6 needs HNS 11.10 (dual stack) and Ipv6Support")
            return
        source_vip = options.source_vip(key.family)
        if options.source_vip_required and not source_vip:
            self.notes.append(
                Note(
                    self.name,
                    f"{key}: not programmed, an Overlay network needs WindowsServiceSourceVIP"
                    f" for IPv{key.family}",
                    problem=NO_SOURCE_VIP,
                )
            )
            return
        same_family = [b for b in backends if _family(b.address) == key.family]
        internal, chosen, left_out = internal_port(port, same_family)
        if left_out:
            self.note(
                f"{key}: target port {port.name or port.port} is {internal} on most backends;"
                f" left out (other numbers): {', '.join(sorted(b.address for b in left_out))}"
            )
        if not chosen:
            self.note(f"{key}: no usable backend, no load balancer (HNS refuses an empty one)")
            return
        flags = (LB_DSR if dsr else 0) | (LB_IPV6 if key.family == 6 else 0)
        affinity = self.service.session_affinity and options.affinity_supported
        self.balancers[key] = WantedLb(
            key=key,
            service=self.name,
            internal_port=internal,
            backends=tuple(sorted(LbBackend(b.address, b.local, b.node_name) for b in chosen)),
            distribution=DISTRIBUTION_SOURCE_IP if affinity else 0,
            port_flags=port_flags,
            flags=flags,
            source_vip=source_vip,
        )

    def render(self) -> RenderedLbs:
        service, options = self.service, self.options
        if service.type == "ExternalName":
            return RenderedLbs()
        everyone = service.usable(local_only=False)
        local = service.usable(local_only=True)
        internal = local if service.internal_local else everyone
        external = local if service.external_local else everyone
        external_dsr = service.external_local and options.dsr_supported
        cluster_dsr = options.dsr and options.dsr_supported
        # A node port exists in each family the service has (its cluster IPs).
        families = sorted({_family(a) for a in service.cluster_ips}) or sorted(
            {_family(b.address) for b in service.backends}
        )
        for port in service.ports:
            protocol = port.protocol
            for vip in service.cluster_ips:
                key = LbKey(protocol, vip, port.port, _family(vip))
                self.add(key, port, internal, 0, cluster_dsr)
            if port.node_port:
                flags = PM_LOCAL_ROUTED_VIP | PM_VIP_EXTERNAL_IP
                for family in families:
                    key = LbKey(protocol, "", port.node_port, family)
                    self.add(key, port, external, flags, external_dsr)
            for vip in (*service.external_ips, *service.load_balancer_ips):
                key = LbKey(protocol, vip, port.port, _family(vip))
                if service.source_ranges and vip in service.load_balancer_ips:
                    self._fail_closed(key)
                    continue
                self.add(key, port, external, PM_VIP_EXTERNAL_IP, external_dsr)
        self._unsayable()
        return RenderedLbs(
            tuple(sorted(self.balancers.values(), key=lambda b: b.key)), tuple(self.notes)
        )

    def _fail_closed(self, key: LbKey) -> None:
        """A load balancer IP whose loadBalancerSourceRanges HNS cannot enforce: an HNS
        load balancer has no source filter, and the backends' ACLs see the backend's
        address after its NAT, not the VIP, so they cannot tell this traffic from
        pod-to-pod. Not programmed, rather than open to every source."""
        ranges = ", ".join(self.service.source_ranges)
        self.notes.append(
            Note(
                self.name,
                f"{key}: not programmed: loadBalancerSourceRanges ({ranges}) cannot be"
                " enforced by an HNS load balancer, so this frontend fails closed",
                problem=SOURCE_RANGES,
            )
        )

    def _unsayable(self) -> None:
        """Fields HNS load balancers cannot express: reported, never silently ignored."""
        service, options = self.service, self.options
        if not self.balancers:
            return
        if service.session_affinity and not options.affinity_supported:
            self.note("ClientIP affinity not programmed: HNS before 12.0 has no SessionAffinity")
        elif service.session_affinity and service.affinity_timeout != DEFAULT_AFFINITY_TIMEOUT:
            self.note(
                f"affinity timeout {service.affinity_timeout}s not programmed: HNS's SourceIP"
                " distribution has no timeout"
            )
        if service.external_local and not options.dsr_supported:
            self.note(
                "externalTrafficPolicy Local: this HNS has no DSR, so backends see the"
                " source VIP, not the client"
            )


def render_service(service: Service, options: LbOptions) -> RenderedLbs:
    """The load balancers ``service`` needs on this host, and what could not be done."""
    return _Renderer(service, options).render()


def load_balancer_json(lb: WantedLb, lb_id: str, endpoint_ids: Iterable[str]) -> Json:
    """``lb`` as the ``HostComputeLoadBalancer`` HCN takes; zero fields omitted, as hcsshim."""
    mapping: Json = {
        "Protocol": LB_PROTOCOLS[lb.key.protocol],
        "InternalPort": lb.internal_port,
        "ExternalPort": lb.key.port,
    }
    if lb.distribution:
        mapping["DistributionType"] = lb.distribution
    if lb.port_flags:
        mapping["Flags"] = lb.port_flags
    out: Json = {
        "ID": lb_id,
        "HostComputeEndpoints": sorted(endpoint_ids),
        "PortMappings": [mapping],
        "SchemaVersion": dict(SCHEMA),
    }
    if lb.key.vip:
        out["FrontendVIPs"] = [lb.key.vip]
    if lb.source_vip:
        out["SourceVIP"] = lb.source_vip
    if lb.flags:
        out["Flags"] = lb.flags
    return out
