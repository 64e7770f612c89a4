"""Typed, immutable desired-state model: what managers hand to platforms.

Protobuf objects stop at the managers; everything downstream (platforms,
renderers, programmers) sees only these frozen dataclasses. Values are
already validated and normalised (canonical address text, ports as ranges,
protocol names lower-case), so renderers can trust them and golden output is
stable.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "Action",
    "DirectionPolicy",
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
    "Policy",
    "PolicyKey",
    "PortRange",
    "Profile",
    "Rule",
    "TierInfo",
    "TierPolicies",
    "WorkloadEndpoint",
    "WorkloadEndpointKey",
]


class IPSetType(enum.Enum):
    IP = "ip"
    IP_AND_PORT = "ip-and-port"
    NET = "net"


@dataclass(frozen=True, slots=True)
class IPSet:
    """An IP set's full desired membership (members are canonical text)."""

    id: str
    type: IPSetType
    members: frozenset[str]


class Action(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"
    PASS = "pass"  # Felix also says "next-tier": skip to the next tier
    LOG = "log"


@dataclass(frozen=True, slots=True)
class PortRange:
    first: int
    last: int

    def __str__(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"


@dataclass(frozen=True, slots=True)
class IcmpMatch:
    type: int
    code: int | None = None  # None: any code

    def __str__(self) -> str:
        return str(self.type) if self.code is None else f"{self.type}/{self.code}"


@dataclass(frozen=True, slots=True)
class Rule:
    """One policy rule; every match field of Felix's ``Rule``.

    Empty tuples and None mean "no constraint". ``protocol`` is a lower-case
    name ("tcp") or a number as text ("132") when Felix sent a number with no
    well-known name.
    """

    action: Action
    ip_version: int | None = None  # 4, 6 or None for both
    protocol: str | None = None
    not_protocol: str | None = None
    src_nets: tuple[str, ...] = ()
    not_src_nets: tuple[str, ...] = ()
    dst_nets: tuple[str, ...] = ()
    not_dst_nets: tuple[str, ...] = ()
    src_ports: tuple[PortRange, ...] = ()
    not_src_ports: tuple[PortRange, ...] = ()
    dst_ports: tuple[PortRange, ...] = ()
    not_dst_ports: tuple[PortRange, ...] = ()
    src_named_port_ip_set_ids: tuple[str, ...] = ()
    not_src_named_port_ip_set_ids: tuple[str, ...] = ()
    dst_named_port_ip_set_ids: tuple[str, ...] = ()
    not_dst_named_port_ip_set_ids: tuple[str, ...] = ()
    src_ip_set_ids: tuple[str, ...] = ()
    not_src_ip_set_ids: tuple[str, ...] = ()
    dst_ip_set_ids: tuple[str, ...] = ()
    not_dst_ip_set_ids: tuple[str, ...] = ()
    dst_ip_port_set_ids: tuple[str, ...] = ()
    icmp: IcmpMatch | None = None
    not_icmp: IcmpMatch | None = None
    rule_id: str = ""

    def ip_set_ids(self) -> frozenset[str]:
        """Every IP set this rule references (a set must exist before use)."""
        return frozenset(
            self.src_named_port_ip_set_ids
            + self.not_src_named_port_ip_set_ids
            + self.dst_named_port_ip_set_ids
            + self.not_dst_named_port_ip_set_ids
            + self.src_ip_set_ids
            + self.not_src_ip_set_ids
            + self.dst_ip_set_ids
            + self.not_dst_ip_set_ids
            + self.dst_ip_port_set_ids
        )


@dataclass(frozen=True, slots=True, order=True)
class PolicyKey:
    """Identity of a policy: (name, namespace, kind) as Felix sends it."""

    name: str
    namespace: str = ""
    kind: str = ""

    def __str__(self) -> str:
        scope = f"{self.namespace}/" if self.namespace else ""
        kind = f"{self.kind}:" if self.kind else ""
        return f"{kind}{scope}{self.name}"


@dataclass(frozen=True, slots=True)
class Policy:
    tier: str
    inbound: tuple[Rule, ...] = ()
    outbound: tuple[Rule, ...] = ()
    namespace: str = ""
    untracked: bool = False
    pre_dnat: bool = False

    def ip_set_ids(self) -> frozenset[str]:
        return frozenset().union(*(r.ip_set_ids() for r in self.inbound + self.outbound))


@dataclass(frozen=True, slots=True)
class Profile:
    inbound: tuple[Rule, ...] = ()
    outbound: tuple[Rule, ...] = ()

    def ip_set_ids(self) -> frozenset[str]:
        return frozenset().union(*(r.ip_set_ids() for r in self.inbound + self.outbound))


@dataclass(frozen=True, slots=True)
class TierInfo:
    """One tier's ordered policies for an endpoint, per direction.

    ``default_action`` is what happens to traffic no policy in the tier
    decided: ``Action.DENY`` (end-of-tier drop) or ``Action.PASS``.
    """

    name: str
    ingress_policies: tuple[PolicyKey, ...] = ()
    egress_policies: tuple[PolicyKey, ...] = ()
    default_action: Action = Action.DENY


@dataclass(frozen=True, slots=True)
class TierPolicies:
    """One tier as it decides one endpoint's traffic in one direction.

    Resolved by the managers: only the tier's policies for that direction
    that are active now, in order (a tier with none is left out).
    """

    name: str
    policies: tuple[PolicyKey, ...]
    default_action: Action = Action.DENY


@dataclass(frozen=True, slots=True)
class DirectionPolicy:
    """Tiers, then the endpoint's active profiles, for one direction."""

    tiers: tuple[TierPolicies, ...] = ()
    profiles: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EffectivePolicy:
    """An endpoint's effective ordered policy: what a platform enforces.

    Computed by the managers from the endpoint's tiers and profile ids and
    the policies and profiles active now; a platform renders it and never
    re-derives it.
    """

    ingress: DirectionPolicy = DirectionPolicy()
    egress: DirectionPolicy = DirectionPolicy()

    def direction(self, inbound: bool) -> DirectionPolicy:
        return self.ingress if inbound else self.egress


@dataclass(frozen=True, slots=True)
class HostEffectivePolicy:
    """A host endpoint's policy at each of its four enforcement points.

    ``normal`` has profiles; untracked, pre-DNAT and forward policy never
    do (Felix applies only policy there).
    """

    normal: EffectivePolicy = EffectivePolicy()
    untracked: EffectivePolicy = EffectivePolicy()
    pre_dnat: EffectivePolicy = EffectivePolicy()
    forward: EffectivePolicy = EffectivePolicy()


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
