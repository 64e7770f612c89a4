"""A workload's QoS controls in words, for ``show`` and ``explain``.

The limits shape traffic rather than judge it: ``explain`` says which
apply on a packet's path beside the verdict, and ``show`` lists them on
the workload's record.
"""

from __future__ import annotations

from dataplane.model import DirectionQos, QosControls, WorkloadEndpoint
from dataplane.ops.evaluate import Stage, Step, Where

__all__ = ["describe", "qos_steps"]


def _rate(bits: int) -> str:
    for unit, size in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if bits >= size:
            return f"{bits / size:g}{unit}bit/s"
    return f"{bits}bit/s"


def _direction(limits: DirectionQos) -> str:
    parts = []
    if (b := limits.bandwidth) is not None:
        text = f"bandwidth {_rate(b.rate)} (burst {b.burst // 8} bytes"
        if b.peakrate:
            text += f", peak {_rate(b.peakrate)}"
        parts.append(text + ")")
    if (p := limits.packet_rate) is not None:
        parts.append(f"{p.rate} packets/s (burst {p.burst})")
    if limits.max_connections:
        parts.append(f"at most {limits.max_connections} connections")
    return ", ".join(parts)


def describe(qos: QosControls) -> dict[str, str]:
    """Each limited direction's limits, in words ({} for none)."""
    return {
        way: _direction(limits)
        for way, limits in (("ingress", qos.ingress), ("egress", qos.egress))
        if limits
    }


def qos_steps(
    source: WorkloadEndpoint | None, destination: WorkloadEndpoint | None, backend: str | None
) -> tuple[Step, ...]:
    """A step for each limit on the path: the sender's egress, the receiver's ingress."""
    out = []
    ways: tuple[tuple[WorkloadEndpoint | None, Stage], ...] = (
        (source, "egress"),
        (destination, "ingress"),
    )
    for endpoint, way in ways:
        if endpoint is None:
            continue
        text = describe(endpoint.qos).get(way)
        if text:
            at = Where(way, str(endpoint.key), rule="qos", backend=backend)
            note = f"{way} of {endpoint.key} is limited: {text}"
            out.append(Step("qos", at, note_text=note))
    return tuple(out)
