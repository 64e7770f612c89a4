"""HNS ACL policies read back into typed rules, and the verdict they give a packet.

The simulated host validates every ACL it is handed with :func:`parse_acl`,
and :func:`endpoint_verdict` is how it (and the tests, and an operator
reading a real host's dump) decides a packet. The rules, as HNS applies
them to traffic between endpoints:

* only ``RuleType`` ``Switch`` rules apply (absent counts as Switch, the
  schema's default); ``Host`` rules are the host firewall's;
* ``Out`` rules see Local = source and Remote = destination, ``In`` rules
  Local = destination and Remote = source;
* ``Protocols`` absent or ``256`` is any protocol; an empty address or port
  list is any; a port list never matches ICMP (or any packet without ports);
* addresses are IPs, CIDRs, or the ``Id`` of a ``SetPolicy`` on the
  endpoint's network (``NESTEDIPSET`` members are set ids in turn);
* among the rules that match, the lowest ``Priority`` wins (absent = 0, as
  hcsshim omits a zero); on a tie ``Block`` wins -- the simulated host's
  choice, which renderers must never depend on;
* an endpoint with no ACL allows everything; with any ACL, what no rule
  allows is blocked (in both directions).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dataplane.windows.hns.hcn import Json

__all__ = [
    "ANY_PROTOCOL",
    "AclRule",
    "Packet",
    "SideVerdict",
    "endpoint_verdict",
    "matches",
    "parse_acl",
    "set_members",
]

ANY_PROTOCOL = 256
IpNet = ipaddress.IPv4Network | ipaddress.IPv6Network
PortRange = tuple[int, int]


@dataclass(frozen=True, slots=True)
class AclRule:
    action: str  # "Allow" | "Block"
    direction: str  # "In" | "Out"
    rule_type: str  # "Switch" | "Host"
    priority: int
    protocols: frozenset[int] | None  # None: any
    local_addresses: tuple[str, ...]
    remote_addresses: tuple[str, ...]
    local_ports: tuple[PortRange, ...]
    remote_ports: tuple[PortRange, ...]


@dataclass(frozen=True, slots=True)
class Packet:
    src: str
    dst: str
    protocol: int  # IANA number: 6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6
    src_port: int | None = None
    dst_port: int | None = None


@dataclass(frozen=True, slots=True)
class SideVerdict:
    """One endpoint's verdict in one direction and the rule that gave it (None: no ACL)."""

    allowed: bool
    rule: AclRule | None


def comma_list(value: object, key: str) -> tuple[str, ...]:
    """A list as hcsshim marshals it (``"a,b"``); absent or empty is no item.

    The one parser of HNS's comma-separated fields (ACL addresses and ports,
    SetPolicy ``Values``); ValueError names ``key`` for anything else.
    """
    if value is None or value == "":
        return ()
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a comma-separated string, not {value!r}")
    items = tuple(part.strip() for part in value.split(","))
    if any(not item for item in items):
        raise ValueError(f"{key} has an empty item: {value!r}")
    return items


def _ports(value: object, key: str) -> tuple[PortRange, ...]:
    out = []
    for item in comma_list(value, key):
        first, dash, last = item.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"{key}: {item!r} is not a port or a port range")
        low, high = int(first), int(last or first)
        if not 0 <= low <= high <= 65535:
            raise ValueError(f"{key}: {item!r} is out of range")
        out.append((low, high))
    return tuple(out)


def _choice(settings: Json, key: str, allowed: Sequence[str], default: str | None) -> str:
    value = settings.get(key, default)
    if value not in allowed:
        raise ValueError(f"{key} must be one of {', '.join(allowed)}, not {value!r}")
    return str(value)


def parse_acl(settings: Json) -> AclRule:
    """The typed rule of an ACL policy's ``Settings``; ValueError names what is wrong."""
    if not isinstance(settings, dict):
        raise ValueError(f"ACL settings must be an object, not {settings!r}")
    unknown = set(settings) - {
        "Id",
        "Protocols",
        "Action",
        "Direction",
        "LocalAddresses",
        "RemoteAddresses",
        "LocalPorts",
        "RemotePorts",
        "RuleType",
        "Priority",
    }
    if unknown:
        raise ValueError(f"unknown ACL settings {sorted(unknown)}")
    priority = settings.get("Priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 65535:
        raise ValueError(f"Priority must be a number 0-65535, not {priority!r}")
    protocols: set[int] = set()
    for item in comma_list(settings.get("Protocols"), "Protocols"):
        if not item.isdigit() or int(item) > ANY_PROTOCOL:
            raise ValueError(f"Protocols: {item!r} is not a protocol number")
        protocols.add(int(item))
    return AclRule(
        action=_choice(settings, "Action", ("Allow", "Block"), None),
        direction=_choice(settings, "Direction", ("In", "Out"), None),
        rule_type=_choice(settings, "RuleType", ("Switch", "Host"), "Switch"),
        priority=priority,
        protocols=None if not protocols or ANY_PROTOCOL in protocols else frozenset(protocols),
        local_addresses=comma_list(settings.get("LocalAddresses"), "LocalAddresses"),
        remote_addresses=comma_list(settings.get("RemoteAddresses"), "RemoteAddresses"),
        local_ports=_ports(settings.get("LocalPorts"), "LocalPorts"),
        remote_ports=_ports(settings.get("RemotePorts"), "RemotePorts"),
    )


def set_members(network: Json) -> dict[str, tuple[IpNet, ...]]:
    """The network's ``SetPolicy`` objects by ``Id``, nested sets expanded to addresses."""
    raw: dict[str, tuple[str, tuple[str, ...]]] = {}
    for policy in network.get("Policies") or ():
        if policy.get("Type") == "SetPolicy":
            s = policy.get("Settings") or {}
            members = comma_list(s.get("Values"), "Values")
            raw[str(s.get("Id"))] = (str(s.get("PolicyType")), members)
    out: dict[str, tuple[IpNet, ...]] = {}

    def expand(set_id: str, seen: frozenset[str]) -> tuple[IpNet, ...]:
        if set_id in out:
            return out[set_id]
        kind, values = raw[set_id]
        if kind != "NESTEDIPSET":
            nets = tuple(ipaddress.ip_network(v, strict=False) for v in values)
        else:
            inner = [v for v in values if v in raw and v not in seen]
            nets = tuple(n for v in inner for n in expand(v, seen | {v}))
        out[set_id] = nets
        return nets

    for set_id in raw:
        expand(set_id, frozenset({set_id}))
    return out


def _address_match(
    tokens: tuple[str, ...], address: str, sets: Mapping[str, tuple[IpNet, ...]]
) -> bool:
    if not tokens:
        return True
    ip = ipaddress.ip_address(address)
    for token in tokens:
        nets: Iterable[IpNet] = sets.get(token) or (ipaddress.ip_network(token, strict=False),)
        if any(ip.version == net.version and ip in net for net in nets):
            return True
    return False


def _port_match(ranges: tuple[PortRange, ...], port: int | None) -> bool:
    if not ranges:
        return True
    return port is not None and any(low <= port <= high for low, high in ranges)


def matches(
    rule: AclRule, direction: str, packet: Packet, sets: Mapping[str, tuple[IpNet, ...]]
) -> bool:
    """True if ``rule`` applies to ``packet`` passing its endpoint in ``direction``."""
    if rule.direction != direction or rule.rule_type != "Switch":
        return False
    if rule.protocols is not None and packet.protocol not in rule.protocols:
        return False
    if direction == "Out":
        local, remote = (packet.src, packet.src_port), (packet.dst, packet.dst_port)
    else:
        local, remote = (packet.dst, packet.dst_port), (packet.src, packet.src_port)
    return (
        _address_match(rule.local_addresses, local[0], sets)
        and _address_match(rule.remote_addresses, remote[0], sets)
        and _port_match(rule.local_ports, local[1])
        and _port_match(rule.remote_ports, remote[1])
    )


def endpoint_verdict(
    endpoint: Json, direction: str, packet: Packet, sets: Mapping[str, tuple[IpNet, ...]]
) -> SideVerdict:
    """What ``endpoint``'s ACLs do with ``packet`` in ``direction`` (``In`` or ``Out``)."""
    rules = [
        parse_acl(p.get("Settings") or {})
        for p in endpoint.get("Policies") or ()
        if p.get("Type") == "ACL"
    ]
    if not rules:
        return SideVerdict(True, None)
    hits = [r for r in rules if matches(r, direction, packet, sets)]
    if not hits:
        return SideVerdict(False, None)
    best = min(hits, key=lambda r: (r.priority, r.action != "Block"))
    return SideVerdict(best.action == "Allow", best)
