"""Typed, immutable desired-state model: what managers hand to platforms.

Protobuf objects stop at the managers; everything downstream (platforms,
renderers, programmers) sees only these frozen dataclasses. Values are
already validated and normalised (canonical address text, ports as ranges,
protocol names lower-case), so renderers can trust them and golden output is
stable.
"""

from dataplane.model.effective import (
    DirectionPolicy,
    EffectivePolicy,
    HostEffectivePolicy,
    TierPolicies,
)
from dataplane.model.endpoints import (
    EndpointStatus,
    HostEndpoint,
    HostEndpointKey,
    IPPool,
    NatInfo,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)
from dataplane.model.policy import (
    PROTOCOL_NUMBERS,
    Action,
    IcmpMatch,
    IPSet,
    IPSetType,
    Policy,
    PolicyKey,
    PortRange,
    Profile,
    Rule,
    TierInfo,
    protocol_number,
)
from dataplane.model.qos import (
    NO_QOS,
    Bandwidth,
    DirectionQos,
    DscpPolicy,
    PacketRate,
    QosControls,
)

__all__ = [
    "NO_QOS",
    "PROTOCOL_NUMBERS",
    "Action",
    "Bandwidth",
    "DirectionPolicy",
    "DirectionQos",
    "DscpPolicy",
    "EffectivePolicy",
    "EndpointStatus",
    "HostEffectivePolicy",
    "HostEndpoint",
    "HostEndpointKey",
    "IPPool",
    "IPSet",
    "IPSetType",
    "IcmpMatch",
    "NatInfo",
    "PacketRate",
    "Policy",
    "PolicyKey",
    "PortRange",
    "Profile",
    "QosControls",
    "Rule",
    "TierInfo",
    "TierPolicies",
    "WorkloadEndpoint",
    "WorkloadEndpointKey",
    "protocol_number",
]
