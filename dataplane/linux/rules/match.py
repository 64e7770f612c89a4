"""What a rule matches: typed terms, ANDed within a rule.

Each term states its meaning, not a syntax: :class:`Addresses` is "the
source address is in any of these networks" however many there are; a
backend that cannot say that in one rule (iptables takes one ``-s``)
spells the OR its own way. A negated term holds when its positive form
does not.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from dataplane.model import IcmpMatch, PortRange

__all__ = [
    "LIMIT_RATE",
    "Addresses",
    "ConnLimit",
    "ConnState",
    "Icmp",
    "InSet",
    "Interface",
    "Limit",
    "LocalAddress",
    "MarkMatch",
    "Match",
    "Port",
    "Ports",
    "Protocol",
    "SetKind",
    "Side",
]


class Side(enum.Enum):
    """Which end of the packet a term looks at."""

    SRC = "src"
    DST = "dst"


class SetKind(enum.Enum):
    """What an IP set's members are, so a backend knows what to look up."""

    ADDRESSES = "addresses"  # addresses and networks
    ADDRESS_PORTS = "address-ports"  # (address, protocol, port): named ports, services
    # (interface, address): the packet's incoming interface with its source
    # address, or outgoing with destination; nftables only.
    INTERFACE_ADDRESSES = "interface-addresses"


@dataclass(frozen=True, slots=True)
class Protocol:
    """The IP protocol, a lower-case name ("tcp", "icmpv6") or a number as text."""

    name: str
    negate: bool = False


@dataclass(frozen=True, slots=True)
class Addresses:
    """The ``side`` address is in any of ``nets`` (negated: in none of them).

    Every net is of the family the rule is rendered for, and none is a /0
    (a renderer resolves those: every packet, or none).
    """

    side: Side
    nets: tuple[str, ...]
    negate: bool = False


@dataclass(frozen=True, slots=True)
class InSet:
    """The ``side`` address (with protocol and port, for ADDRESS_PORTS) is in IP set ``name``.

    ``name`` is the kernel's name of the set, for the rule's IP version.
    """

    side: Side
    name: str
    kind: SetKind = SetKind.ADDRESSES
    negate: bool = False


@dataclass(frozen=True, slots=True)
class Ports:
    """The ``side`` port is in any of ``ranges`` or, with its address and
    protocol, in any of the ADDRESS_PORTS sets ``named`` (Felix's named
    ports); negated, in none of them.

    Needs a :class:`Protocol` term with ports (TCP, UDP or SCTP) before it.
    """

    side: Side
    ranges: tuple[PortRange, ...] = ()
    named: tuple[str, ...] = ()
    negate: bool = False


@dataclass(frozen=True, slots=True)
class Port:
    """The ``side`` port is exactly ``port`` (needs a :class:`Protocol` with ports)."""

    side: Side
    port: int


@dataclass(frozen=True, slots=True)
class LocalAddress:
    """The ``side`` address is one of this host's own (the kernel's LOCAL type).

    ``out_interface``: local to the interface the packet leaves by, not
    merely to the host.
    """

    side: Side
    negate: bool = False
    out_interface: bool = False


@dataclass(frozen=True, slots=True)
class Icmp:
    """ICMP (``version`` 4) or ICMPv6 (6) of a type, and optionally a code."""

    version: int
    icmp: IcmpMatch
    negate: bool = False


@dataclass(frozen=True, slots=True)
class MarkMatch:
    """The packet mark's ``mask`` bits equal ``value`` (all set, or none)."""

    mask: int
    value: int

    @classmethod
    def has(cls, bits: int) -> MarkMatch:
        return cls(bits, bits)

    @classmethod
    def lacks(cls, bits: int) -> MarkMatch:
        return cls(bits, 0)


@dataclass(frozen=True, slots=True)
class ConnState:
    """The connection's conntrack state is any of ``states`` (upper case, as conntrack says)."""

    states: tuple[str, ...]
    negate: bool = False


@dataclass(frozen=True, slots=True)
class Interface:
    """The packet arrived on (``inbound``) or leaves by interface ``name``.

    A trailing ``+`` matches every name that starts with the rest.
    """

    name: str
    inbound: bool
    negate: bool = False


# What a limit match takes: up to the kernel's XT_LIMIT_SCALE, 10,000 a
# unit. A LogActionRateLimit (LOG_RATE, at most 9,999) and a packet rate
# (1-10,000 a second, the edge's range) both fit; 10,000/second is the
# fastest rate iptables' limit match can express.
LIMIT_RATE = re.compile(r"(?:[1-9]\d{0,3}|10000)/(?:second|minute|hour|day)")


@dataclass(frozen=True, slots=True)
class Limit:
    """At most ``rate`` packets (:data:`LIMIT_RATE`: ``N/second``, ``minute``,
    ``hour`` or ``day``), in bursts of ``burst`` (0: the kernel's default)."""

    rate: str
    burst: int = 0


@dataclass(frozen=True, slots=True)
class ConnLimit:
    """More than ``above`` connections are open that this rule saw begin.

    Counted by the rule itself (iptables ``connlimit`` over every source,
    nft ``ct count``), so each rule that carries one counts apart: a limit
    per endpoint needs a rule per endpoint.
    """

    above: int


Match = (
    Protocol
    | Addresses
    | InSet
    | Ports
    | Port
    | LocalAddress
    | Icmp
    | MarkMatch
    | ConnState
    | Interface
    | Limit
    | ConnLimit
)
