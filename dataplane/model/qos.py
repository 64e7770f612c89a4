"""A workload's QoS controls: bandwidth, packet rate and connections, per direction.

What Felix sends as ``WorkloadEndpoint.qos_controls`` (from the pod's
``qos.projectcalico.org/*`` and ``kubernetes.io/*-bandwidth``
annotations), validated and with Felix's defaults filled in. *Ingress* is
traffic to the workload, *egress* traffic from it. Units are Felix's:
bandwidth and peak rate in bits per second, burst in bits, minimum burst
in bytes, packet rate in packets per second, burst in packets.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NO_QOS", "Bandwidth", "DirectionQos", "DscpPolicy", "PacketRate", "QosControls"]


@dataclass(frozen=True, slots=True)
class Bandwidth:
    """A token bucket: ``rate`` on average, ``burst`` at once, never above ``peakrate``.

    Attributes:
        rate: bits per second.
        burst: the bucket's size, bits.
        peakrate: bits per second, 0 for no peak rate.
        minburst: bytes the peak bucket holds (0: the kernel's minimum, the
            device's MTU plus its header).
    """

    rate: int
    burst: int
    peakrate: int = 0
    minburst: int = 0


@dataclass(frozen=True, slots=True)
class PacketRate:
    """At most ``rate`` packets a second, ``burst`` of them at once; the rest dropped."""

    rate: int
    burst: int


@dataclass(frozen=True, slots=True)
class DirectionQos:
    """One direction's limits; each None (or 0) when not limited."""

    bandwidth: Bandwidth | None = None
    packet_rate: PacketRate | None = None
    max_connections: int = 0  # open connections beyond this are refused (TCP reset)

    def __bool__(self) -> bool:
        return bool(self.bandwidth or self.packet_rate or self.max_connections)


@dataclass(frozen=True, slots=True)
class QosControls:
    ingress: DirectionQos = DirectionQos()
    egress: DirectionQos = DirectionQos()

    def __bool__(self) -> bool:
        return bool(self.ingress or self.egress)

    def direction(self, inbound: bool) -> DirectionQos:
        """``ingress`` for traffic to the workload, else ``egress``."""
        return self.ingress if inbound else self.egress


NO_QOS = QosControls()


@dataclass(frozen=True, slots=True)
class DscpPolicy:
    """Mark the endpoint's egress packets with DSCP ``value`` (0-63).

    Felix sends one per endpoint, from the pod's ``qos.projectcalico.org/dscp``
    annotation, for traffic leaving the cluster (to neither an IP pool nor
    this host); its ``destination`` is then empty. A non-empty
    ``destination`` (CIDR) narrows it to that network.
    """

    value: int
    destination: str = ""
