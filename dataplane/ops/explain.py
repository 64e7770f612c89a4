"""``explain``: which policy decides a packet, from the driver's own desired state.

One evaluator for every platform: the path of a new flow through a node's
state (a :class:`~dataplane.sim.platform.SimState`: what the managers
handed the platform) is evaluated with :mod:`dataplane.ops.evaluate`, the
same code the kernel and simulated-HNS tests hold the platforms to.

The path, as the Linux platform enforces it (Windows renders the same
endpoint semantics):

* each address is *located*: a local workload endpoint owning it, else the
  host (an address a host endpoint expects), else outside;
* a destination that is a service frontend (cluster, external or
  load-balancer IP, or a node port on a host address; protocol and port
  equal) is DNATed to each backend kube-proxy could pick, and each backend
  is a path of its own; a frontend with nowhere to go is refused;
* a path meets the source workload's egress policy (anti-spoofing first),
  then the destination workload's ingress policy; host-to-workload
  traffic is not policed (Felix's ``cali-OUTPUT``, Windows' host-allow
  ACL); workload-to-host traffic meets ``DefaultEndpointToHostAction``
  after egress, which is configuration and only evaluated when given.

Host endpoint policy is *not* evaluated: which host endpoint polices a
packet depends on the interfaces it crosses, which the desired state does
not hold (``docs/host-endpoints.md``). The steps say so wherever it could
apply. Nor are backend health checks (not part of the desired state):
every usable backend counts. Pure: no I/O; the answer is a frozen
:class:`Explanation`.

JSON (``Explanation.to_json``)::

    {"verdict": "allow" | "deny",
     "decided_by": {"direction": "egress" | "ingress" | "service" | "none",
                    "endpoint": workload key | null, "tier": str | null,
                    "policy": policy key | null,
                    "rule": int | "end-of-tier" | "profile" | "default" | <label>,
                    "profile": {"name": str, "rule": int} | null,
                    "backend": "address:port" | null},
     "steps": [{"kind": ..., <decided_by's keys that apply>, "outcome"?, "mismatch"?,
                "note"?}, ...],
     "packet": {"src", "dst", "protocol", "src_port", "dst_port", "icmp_type", "icmp_code"},
     "source" / "destination": {"address", "kind": "workload" | "host" | "outside",
                                "endpoint", "interface", "host_endpoint"},
     "service": null | {"service": "ns/name", "port_name", "frontend": "cluster-ip" |
                        "external-ip" | "load-balancer-ip" | "node-port", "address",
                        "port", "protocol", "backends": ["address:port", ...]}}

``rule`` is a policy rule's index, or: ``end-of-tier`` (the tier's default
Deny), ``profile`` (a profile's rule: ``profile`` names it and the index),
``default`` (nothing allowed it; with direction ``none``: no local
endpoint's policy applies), ``admin-down``, ``spoofed-source``,
``not-policed``, ``endpoint-to-host``, ``no-backends``,
``no-local-backends``, ``source-range``. A deny through a service names
the first backend denied; an allow, the first backend's last gate.
"""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, replace
from typing import Literal

from dataplane.model import EffectivePolicy, WorkloadEndpoint
from dataplane.model.services import Service, ServicePort
from dataplane.ops.evaluate import (
    PROTOCOL_NUMBERS,
    Decision,
    Direction,
    Packet,
    PolicyState,
    Step,
    Where,
    direction_decision,
    in_any,
    join,
    resolved_policy,
)
from dataplane.ops.qos_text import qos_steps
from dataplane.sim.platform import SimState
from dataplane.windows.services.lb_render import internal_port

__all__ = ["Explanation", "Location", "ServiceHit", "describe", "explain", "locate", "make_packet"]

Verdict = Literal["allow", "deny"]
LocationKind = Literal["workload", "host", "outside"]
FrontendKind = Literal["cluster-ip", "external-ip", "load-balancer-ip", "node-port"]

_PORT_PROTOCOLS = frozenset({"tcp", "udp", "sctp", "udplite"})
_ECHO_REQUEST = {4: 8, 6: 128}
_NAMES = {number: name for name, number in PROTOCOL_NUMBERS.items()}
NO_POLICY = "no local endpoint's policy applies"


# --- where the addresses are -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Location:
    """What an address is on this node."""

    address: str
    kind: LocationKind
    endpoint: WorkloadEndpoint | None = None
    host_endpoint: str | None = None  # the host endpoint expecting the address

    def to_json(self) -> dict[str, object]:
        ep = self.endpoint
        return {
            "address": self.address,
            "kind": self.kind,
            "endpoint": None if ep is None else str(ep.key),
            "interface": None if ep is None else ep.name,
            "host_endpoint": self.host_endpoint,
        }

    def __str__(self) -> str:
        if self.endpoint is not None:
            return f"{self.address}, workload {self.endpoint.key} ({self.endpoint.name})"
        if self.host_endpoint is not None:
            return f"{self.address}, this host (host endpoint {self.host_endpoint})"
        return f"{self.address}, outside this node"


def locate(state: SimState, address: str) -> Location:
    """A local workload owning ``address``, else the host, else outside."""
    for key in sorted(state.workload_endpoints):
        ep = state.workload_endpoints[key]
        if in_any(address, (*ep.ipv4_nets, *ep.ipv6_nets)):
            return Location(address, "workload", endpoint=ep)
    for hkey in sorted(state.host_endpoints):
        hep = state.host_endpoints[hkey]
        if in_any(address, (*hep.expected_ipv4_addrs, *hep.expected_ipv6_addrs)):
            return Location(address, "host", host_endpoint=str(hkey))
    return Location(address, "outside")


def _sender(state: SimState, name: str, address: str) -> Location:
    """``address`` sent by the workload ``name`` (whether or not it owns the address)."""
    for key in sorted(state.workload_endpoints):
        ep = state.workload_endpoints[key]
        if name in (str(key), key.workload_id, ep.name):
            return Location(address, "workload", endpoint=ep)
    raise ValueError(f"no local workload endpoint {name!r}")


# --- services ------------------------------------------------------------------------------


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


def _endpoint_text(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _frontend(
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
        return [_endpoint_text(b.address, number) for b in family]
    out = []
    for backend in family:
        target = backend.port_for(port)
        if target is not None:
            out.append(_endpoint_text(backend.address, target))
    return out


def _backends(
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


# --- one path: source to one destination ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Context:
    state: SimState
    policy: PolicyState
    to_host_action: str | None


def _decide(
    ctx: _Context, ep: WorkloadEndpoint, direction: Direction, packet: Packet, backend: str | None
) -> Decision:
    # The managers' resolution is what the platform enforces; a hand-built
    # state without it resolves the same way here.
    effective = ctx.state.effective.get(ep.key)
    policy = (
        effective.direction(direction == "ingress")
        if isinstance(effective, EffectivePolicy)
        else resolved_policy(ep, direction, ctx.policy)
    )
    return direction_decision(ep, direction, policy, packet, ctx.policy, backend=backend)


def _to_host(
    ctx: _Context, egress: Decision, src: WorkloadEndpoint, backend: str | None
) -> Decision:
    """After a workload's egress allowed traffic to the host: DefaultEndpointToHostAction."""
    at = Where("egress", str(src.key), rule="endpoint-to-host", backend=backend)
    action = ctx.to_host_action
    if action is None:
        note = "DefaultEndpointToHostAction then applies: configuration, not evaluated"
        return replace(egress, steps=(*egress.steps, Step("not-evaluated", at, note_text=note)))
    action = action.upper()
    allowed = action != "DROP"
    note = f"DefaultEndpointToHostAction {action}"
    if action == "RETURN":
        note += ": on to the host's own INPUT rules (host endpoint policy is not evaluated)"
    step = Step("endpoint-to-host", at, "allow" if allowed else "deny", note)
    reason = f"egress {src.name}: DefaultEndpointToHostAction {action}"
    return join(egress, Decision(allowed, reason, at, (step,)))


def _host_note(
    ctx: _Context, source: Location, destination: Location, backend: str | None
) -> tuple[Step, ...]:
    """Say where host endpoint policy could apply and is not evaluated."""
    heps = ctx.state.host_endpoints
    # An all-interfaces endpoint's forward policy also sees pod-to-pod traffic.
    crosses = {source.kind, destination.kind} != {"workload"}
    if not heps or not (crosses or any(h.name == "" for h in heps.values())):
        return ()
    names = ", ".join(str(k) for k in sorted(heps))
    note = f"host endpoint policy is not evaluated ({names})"
    return (Step("not-evaluated", Where(backend=backend), note_text=note),)


def _path(
    ctx: _Context, packet: Packet, source: Location, destination: Location, backend: str | None
) -> Decision:
    src, dst = source.endpoint, destination.endpoint
    if src is not None and dst is not None and src.key == dst.key and backend is None:
        # Loopback inside the pod: it never reaches the node.
        at = Where("none", rule="default")
        note = f"traffic within one workload never leaves it: {NO_POLICY}"
        return Decision(True, note, at, (Step("no-policy", at, "allow", note),))
    notes = _host_note(ctx, source, destination, backend) + qos_steps(src, dst, backend)
    if src is not None:
        decision = _decide(ctx, src, "egress", packet, backend)
        if dst is not None:
            decision = join(decision, _decide(ctx, dst, "ingress", packet, backend))
        elif destination.kind == "host" and decision.allowed:
            decision = _to_host(ctx, decision, src, backend)
    elif dst is not None and source.kind == "host":
        at = Where("ingress", str(dst.key), rule="not-policed", backend=backend)
        note = "traffic from the host to its own workloads is not policed"
        decision = Decision(True, note, at, (Step("not-policed", at, "allow", note),))
    elif dst is not None:
        decision = _decide(ctx, dst, "ingress", packet, backend)
    else:
        at = Where("none", rule="default", backend=backend)
        decision = Decision(True, NO_POLICY, at, (Step("no-policy", at, "allow", NO_POLICY),))
    return replace(decision, steps=notes + decision.steps)


# --- the answer ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Explanation:
    """Which step of the path decided ``packet``, and every step evaluated on the way."""

    packet: Packet
    source: Location
    destination: Location
    verdict: Verdict
    decided_by: Where
    steps: tuple[Step, ...]
    service: ServiceHit | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "verdict": self.verdict,
            "decided_by": self.decided_by.to_json(),
            "steps": [step.to_json() for step in self.steps],
            "packet": asdict(self.packet),
            "source": self.source.to_json(),
            "destination": self.destination.to_json(),
            "service": None if self.service is None else self.service.to_json(),
        }

    def to_text(self) -> str:
        """The path as an operator reads it: one line per step, then the verdict."""
        lines = [
            f"packet: {self.packet}",
            f"source: {self.source}",
            f"destination: {self.destination}",
        ]
        lines += [_INDENT * _depth(step) + _line(step) for step in self.steps]
        lines.append(f"verdict: {self.verdict}, decided by {describe(self.decided_by)}")
        return "\n".join(lines) + "\n"


def explain(
    state: SimState,
    src: str,
    dst: str,
    protocol: str,
    port: int | None = None,
    *,
    icmp_type: int | None = None,
    icmp_code: int | None = None,
    src_port: int | None = None,
    endpoint_to_host_action: str | None = None,
    sender: str | None = None,
    platform: str = "linux",
) -> Explanation:
    """Evaluate a new flow's first packet on ``state`` and say what decided it.

    ``protocol`` is a name or number; ``icmp`` means ICMPv6 for IPv6
    addresses, and an ICMP packet without a type is an echo request (code
    0). ``port`` (the destination port) is required for TCP, UDP and SCTP;
    without ``src_port`` no source-port rule matches. Give
    ``endpoint_to_host_action`` (the config's DefaultEndpointToHostAction)
    to have workload-to-host traffic judged by it. ``sender`` names the
    workload that sends the packet (its key as text, workload id or
    interface) when the source address is not its own: a spoofed source.
    ``platform`` ``windows`` applies what HNS load balancers cannot express
    (one target port number per service port); policy is the same.

    Raises:
        ValueError: an address, protocol or port that does not make a packet.
    """
    packet = make_packet(
        src, dst, protocol, port, icmp_type=icmp_type, icmp_code=icmp_code, src_port=src_port
    )
    ctx = _Context(
        state, PolicyState(state.policies, state.profiles, state.ipsets), endpoint_to_host_action
    )
    source = locate(state, packet.src) if sender is None else _sender(state, sender, packet.src)
    destination = locate(state, packet.dst)
    frontend = _frontend(state, packet, destination)
    if frontend is None:
        d = _path(ctx, packet, source, destination, None)
        return Explanation(packet, source, destination, _verdict(d.allowed), d.by, d.steps)
    service, sport, kind = frontend
    backends, refusal = _backends(state, packet, source, frontend, windows=platform == "windows")
    hit = ServiceHit(str(service.key), sport, kind, packet.dst, tuple(backends))
    found = Step("service", Where("service"), note_text=_service_note(hit))
    if refusal is not None:
        return Explanation(packet, source, destination, "deny", refusal.at, (found, refusal), hit)
    steps = [found]
    decisions = []
    for target in backends:
        address, _, target_port = target.rpartition(":")
        dnat = replace(packet, dst=address.strip("[]"), dst_port=int(target_port))
        where = locate(state, dnat.dst)
        steps.append(
            Step("backend", Where("service", backend=target), note_text=f"DNAT to {where}")
        )
        decision = _path(ctx, dnat, source, where, target)
        steps += decision.steps
        decisions.append(decision)
    denied = [d for d in decisions if not d.allowed]
    by = denied[0].by if denied else decisions[0].by
    return Explanation(packet, source, destination, _verdict(not denied), by, tuple(steps), hit)


def _verdict(allowed: bool) -> Verdict:
    return "allow" if allowed else "deny"


def _service_note(hit: ServiceHit) -> str:
    return (
        f"{hit.frontend} {_endpoint_text(hit.address, hit.frontend_port)}/{hit.port.protocol}"
        f" is service {hit.service} port {hit.port.name or hit.port.port}:"
        f" {len(hit.backends)} backend(s)"
        + (f": {', '.join(hit.backends)}" if hit.backends else "")
    )


def make_packet(
    src: str,
    dst: str,
    protocol: str,
    port: int | None = None,
    *,
    icmp_type: int | None = None,
    icmp_code: int | None = None,
    src_port: int | None = None,
) -> Packet:
    """The packet an operator means (canonical addresses, protocol by name), or ValueError."""
    s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    if s.version != d.version:
        raise ValueError(f"{src} and {dst} are not of one address family")
    name = protocol.strip().lower()
    if name.isdigit():
        name = _NAMES.get(int(name), name)
    elif name not in PROTOCOL_NUMBERS:
        raise ValueError(
            f"unknown protocol {protocol!r}: a name ({', '.join(PROTOCOL_NUMBERS)}) or a number"
        )
    if name in ("icmp", "icmpv6"):
        if port is not None or src_port is not None:
            raise ValueError(f"{name} has no ports")
        name = "icmp" if s.version == 4 else "icmpv6"
        kind = _ECHO_REQUEST[s.version] if icmp_type is None else icmp_type
        return Packet(str(s), str(d), name, icmp_type=kind, icmp_code=icmp_code or 0)
    if icmp_type is not None or icmp_code is not None:
        raise ValueError(f"ICMP type and code are for icmp, not {name}")
    if name in _PORT_PROTOCOLS:
        if port is None:
            raise ValueError(f"{name} needs a destination port")
        return Packet(str(s), str(d), name, src_port, port)
    if port is not None or src_port is not None:
        raise ValueError(f"protocol {name} has no ports")
    return Packet(str(s), str(d), name)


# --- text ----------------------------------------------------------------------------------

_INDENT = "  "
_DEPTH = {
    "direction": 0,
    "tier": 1,
    "policy": 2,
    "end-of-tier": 2,
    "profile": 1,
    "default": 1,
    "admin-down": 1,
    "spoofed-source": 1,
    "no-backends": 1,
    "no-local-backends": 1,
    "source-range": 1,
    "unenforceable": 1,
}
_MATCHED = {
    "allow": "matched: allow",
    "deny": "matched: deny",
    "log": "matched: log, goes on",
}


def _depth(step: Step) -> int:
    if step.kind == "rule":
        depth = 3 if step.at.policy is not None else 2
    else:
        depth = _DEPTH.get(step.kind, 0)
    return depth + (1 if step.at.backend is not None and step.kind != "backend" else 0)


def _line(step: Step) -> str:
    at = step.at
    if step.kind == "direction":
        return f"{at.direction} policy of workload {at.endpoint} ({step.note})"
    if step.kind == "tier":
        return f"tier {at.tier} ({step.note})"
    if step.kind == "policy":
        return f"policy {at.policy} ({step.note})"
    if step.kind == "profile":
        return f"profile {at.profile.name if at.profile else ''}"
    if step.kind == "rule":
        return f"rule {_rule_index(at)}: {step.note} -> {_rule_outcome(step)}"
    if step.kind == "backend":
        return f"backend {at.backend}: {step.note}"
    return step.note + (f" -> {step.outcome}" if step.outcome else "")


def _rule_index(at: Where) -> object:
    return at.profile.rule if at.profile is not None else at.rule


def _rule_outcome(step: Step) -> str:
    if step.outcome == "no-match":
        return f"no match ({step.mismatch})"
    if step.outcome == "pass":
        in_profile = step.at.profile is not None
        return (
            "matched: pass, ends the profile" if in_profile else "matched: pass, to the next tier"
        )
    return _MATCHED.get(step.outcome or "", str(step.outcome))


def describe(at: Where) -> str:
    """A decision's place in words: ``ingress of k8s/ns/pod/eth0, tier t, policy p, rule 0``."""
    if at.direction == "none":
        return NO_POLICY if at.backend is None else f"backend {at.backend}, {NO_POLICY}"
    parts = [f"{at.direction} of {at.endpoint}" if at.endpoint else at.direction]
    if at.backend is not None:
        parts.insert(0, f"backend {at.backend}")
    if at.tier is not None:
        parts.append(f"tier {at.tier}")
    if at.policy is not None:
        parts.append(f"policy {at.policy}")
    if at.profile is not None:
        parts.append(f"profile {at.profile.name}, rule {at.profile.rule}")
    elif isinstance(at.rule, int):
        parts.append(f"rule {at.rule}")
    elif at.rule is not None:
        parts.append(at.rule)
    return ", ".join(parts)
