"""``WorkloadEndpoint.qos_controls`` -> :class:`~dataplane.model.QosControls`, validated.

The ranges are the ones Calico validates the pod's annotations against
(libcalico-go's workload endpoint conversion), so a value Felix sends is
always in range; an embedder's is held to the same. Each one the kernel
holds in a 32-bit field (a connection limit, a TBF's bucket in bytes) or
in the ``limit`` match's scale (packet rates, at most 10,000) is bounded
there. A zero burst gets Calico's default, as the annotation's conversion
gives it: 4 Gi bits for a bandwidth, 5 packets for a packet rate.
"""

from __future__ import annotations

from collections.abc import Sequence

from dataplane.errors import InputError
from dataplane.managers.scalars import cidr
from dataplane.model import Bandwidth, DirectionQos, DscpPolicy, PacketRate, QosControls
from dataplane.model.qos import NO_QOS
from dataplane.wire._pb import felixbackend_pb2 as pb

__all__ = ["dscp_policies", "qos_controls"]

_BANDWIDTH = (1_000, 10**15)  # bits per second
_BURST = (1_000, 0xFFFF_FFFF * 8)  # bits: the bucket is a u32 of bytes
_DEFAULT_BURST = 4 * 2**30  # bits
_PEAKRATE = (1_010, 101 * 10**13)
_MINBURST = (1_000, 100_000_000)  # bytes
_PACKETS = (1, 10_000)  # XT_LIMIT_SCALE: the limit match's largest rate and burst
_DEFAULT_PACKET_BURST = 5
_CONNECTIONS = (1, 0xFFFF_FFFF)


def _ranged(value: int, bounds: tuple[int, int], field: str) -> int:
    low, high = bounds
    if not low <= value <= high:
        raise InputError(field, value, f"out of range {low}-{high}")
    return value


def _unset_base(q: pb.QoSControls, way: str, field: str, base: str, *dependents: str) -> bool:
    """Whether ``{way}{base}`` is 0; then none of its ``dependents`` may be set."""
    if getattr(q, f"{way}{base}"):
        return False
    for name in dependents:
        if value := getattr(q, f"{way}{name}"):
            raise InputError(f"{field}.{way}{name}", value, f"needs {way}{base}")
    return True


def _bandwidth(q: pb.QoSControls, way: str, field: str) -> Bandwidth | None:
    if _unset_base(q, way, field, "Bandwidth", "Burst", "Peakrate", "Minburst"):
        return None
    rate = getattr(q, f"{way}Bandwidth")
    burst, peak, minburst = (getattr(q, f"{way}{n}") for n in ("Burst", "Peakrate", "Minburst"))
    _ranged(rate, _BANDWIDTH, f"{field}.{way}Bandwidth")
    if burst:
        _ranged(burst, _BURST, f"{field}.{way}Burst")
    if peak:
        _ranged(peak, _PEAKRATE, f"{field}.{way}Peakrate")
        # The kernel's TBF refuses a peak rate at or below the rate.
        if peak <= rate:
            raise InputError(f"{field}.{way}Peakrate", peak, f"not above {way}Bandwidth {rate}")
    if minburst:
        if not peak:
            raise InputError(f"{field}.{way}Minburst", minburst, f"needs {way}Peakrate")
        _ranged(minburst, _MINBURST, f"{field}.{way}Minburst")
    return Bandwidth(rate, burst or _DEFAULT_BURST, peak, minburst)


def _packet_rate(q: pb.QoSControls, way: str, field: str) -> PacketRate | None:
    if _unset_base(q, way, field, "PacketRate", "PacketBurst"):
        return None
    rate, burst = getattr(q, f"{way}PacketRate"), getattr(q, f"{way}PacketBurst")
    _ranged(rate, _PACKETS, f"{field}.{way}PacketRate")
    if burst:
        _ranged(burst, _PACKETS, f"{field}.{way}PacketBurst")
    return PacketRate(rate, burst or _DEFAULT_PACKET_BURST)


def _direction(q: pb.QoSControls, way: str, field: str) -> DirectionQos:
    connections = getattr(q, f"{way}MaxConnections")
    if connections:
        _ranged(connections, _CONNECTIONS, f"{field}.{way}MaxConnections")
    return DirectionQos(_bandwidth(q, way, field), _packet_rate(q, way, field), connections)


def qos_controls(ep: pb.WorkloadEndpoint, field: str) -> QosControls:
    """The endpoint's QoS controls (``NO_QOS`` when it has none)."""
    if not ep.HasField("qos_controls"):
        return NO_QOS
    q = ep.qos_controls
    controls = QosControls(_direction(q, "Ingress", field), _direction(q, "Egress", field))
    return controls if controls else NO_QOS


def dscp_policies(policies: Sequence[pb.QoSPolicy], field: str) -> tuple[DscpPolicy, ...]:
    """``qos_policies``: each DSCP value 0-63 (six bits), each destination "" or a CIDR."""
    out = []
    for i, policy in enumerate(policies):
        value = _ranged(policy.dscp, (0, 63), f"{field}[{i}].dscp")
        destination = policy.destination
        if destination:
            destination = cidr(destination, f"{field}[{i}].destination")
        out.append(DscpPolicy(value, destination))
    return tuple(out)
