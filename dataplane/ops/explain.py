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
from dataplane.ops.evaluate import (
    PROTOCOL_NUMBERS,
    Decision,
    Direction,
    Packet,
    PolicyState,
    Step,
    Where,
    direction_decision,
    join,
    resolved_policy,
)
from dataplane.ops.locate import Location, locate
from dataplane.ops.locate import sender as named_sender
from dataplane.ops.qos_text import qos_steps
from dataplane.ops.service_hit import (
    ServiceHit,
    endpoint_text,
    service_backends,
    service_frontend,
)
from dataplane.ops.trace_text import NO_POLICY, describe, step_line
from dataplane.sim.platform import SimState

__all__ = ["Explanation", "Location", "ServiceHit", "describe", "explain", "locate", "make_packet"]

Verdict = Literal["allow", "deny"]

_PORT_PROTOCOLS = frozenset({"tcp", "udp", "sctp", "udplite"})
_ECHO_REQUEST = {4: 8, 6: 128}
_NAMES = {number: name for name, number in PROTOCOL_NUMBERS.items()}


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
        lines += [step_line(step) for step in self.steps]
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
    source = (
        locate(state, packet.src) if sender is None else named_sender(state, sender, packet.src)
    )
    destination = locate(state, packet.dst)
    frontend = service_frontend(state, packet, destination)
    if frontend is None:
        d = _path(ctx, packet, source, destination, None)
        return Explanation(packet, source, destination, _verdict(d.allowed), d.by, d.steps)
    service, sport, kind = frontend
    backends, refusal = service_backends(
        state, packet, source, frontend, windows=platform == "windows"
    )
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
        f"{hit.frontend} {endpoint_text(hit.address, hit.frontend_port)}/{hit.port.protocol}"
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
