"""Endpoint values: workload and host endpoints, pools, status."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dataplane.model.policy import TierInfo
from dataplane.model.qos import NO_QOS, DscpPolicy, QosControls

__all__ = [
    "EndpointStatus",
    "HostEndpoint",
    "HostEndpointKey",
    "IPPool",
    "NatInfo",
    "WorkloadEndpoint",
    "WorkloadEndpointKey",
]


@dataclass(frozen=True, slots=True)
class NatInfo:
    ext_ip: str
    int_ip: str


@dataclass(frozen=True, slots=True, order=True)
class WorkloadEndpointKey:
    orchestrator_id: str
    workload_id: str
    endpoint_id: str

    def __str__(self) -> str:
        return f"{self.orchestrator_id}/{self.workload_id}/{self.endpoint_id}"


@dataclass(frozen=True, slots=True)
class WorkloadEndpoint:
    key: WorkloadEndpointKey
    name: str  # host-side interface name
    state: str = "active"
    mac: str = ""
    profile_ids: tuple[str, ...] = ()
    ipv4_nets: tuple[str, ...] = ()
    ipv6_nets: tuple[str, ...] = ()
    tiers: tuple[TierInfo, ...] = ()
    ipv4_nat: tuple[NatInfo, ...] = ()
    ipv6_nat: tuple[NatInfo, ...] = ()
    allow_spoofed_source_prefixes: tuple[str, ...] = ()
    qos: QosControls = NO_QOS
    dscp: tuple[DscpPolicy, ...] = ()  # egress DSCP marking (qos_policies)

    @property
    def admin_up(self) -> bool:
        return self.state == "active"


@dataclass(frozen=True, slots=True, order=True)
class HostEndpointKey:
    endpoint_id: str

    def __str__(self) -> str:
        return self.endpoint_id


@dataclass(frozen=True, slots=True)
class HostEndpoint:
    key: HostEndpointKey
    name: str = ""  # interface name; empty means "all interfaces"
    profile_ids: tuple[str, ...] = ()
    tiers: tuple[TierInfo, ...] = ()
    untracked_tiers: tuple[TierInfo, ...] = ()
    pre_dnat_tiers: tuple[TierInfo, ...] = ()
    forward_tiers: tuple[TierInfo, ...] = ()
    expected_ipv4_addrs: tuple[str, ...] = ()
    expected_ipv6_addrs: tuple[str, ...] = ()
    dscp: tuple[DscpPolicy, ...] = ()  # egress DSCP marking (qos_policies)


@dataclass(frozen=True, slots=True)
class IPPool:
    """An IPAM pool: pod traffic leaving all pools from a masquerade pool is NATed."""

    cidr: str
    masquerade: bool = False


class EndpointStatus(enum.Enum):
    """Oper status as Felix reports it."""

    UP = "up"
    DOWN = "down"
    ERROR = "error"
