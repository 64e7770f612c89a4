"""Policy values: rules, policies, profiles, tiers, IP sets."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "PROTOCOL_NUMBERS",
    "Action",
    "IPSet",
    "IPSetType",
    "IcmpMatch",
    "Policy",
    "PolicyKey",
    "PortRange",
    "Profile",
    "Rule",
    "TierInfo",
    "protocol_number",
]

# The protocols Felix names (any other travels as its number, as text).
PROTOCOL_NUMBERS = {"icmp": 1, "tcp": 6, "udp": 17, "icmpv6": 58, "sctp": 132, "udplite": 136}


def protocol_number(protocol: str) -> int:
    """A :attr:`Rule.protocol` value as its IANA number: ``tcp`` -> 6, ``"47"`` -> 47."""
    return PROTOCOL_NUMBERS.get(protocol) or int(protocol)


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


# Rules and tiers are weakly referenceable: the converter's memo holds them
# only while a policy, profile or endpoint does (managers/convert.py).
@dataclass(frozen=True, slots=True, weakref_slot=True)
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

    @property
    def staged(self) -> bool:
        """A staged policy (StagedNetworkPolicy, ...): Felix computes it, never enforces it."""
        return self.kind.startswith("Staged")

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


@dataclass(frozen=True, slots=True, weakref_slot=True)
class TierInfo:
    """One tier's ordered policies for an endpoint, per direction.

    ``default_action`` is what happens to traffic no policy in the tier
    decided: ``Action.DENY`` (end-of-tier drop) or ``Action.PASS``.
    """

    name: str
    ingress_policies: tuple[PolicyKey, ...] = ()
    egress_policies: tuple[PolicyKey, ...] = ()
    default_action: Action = Action.DENY
