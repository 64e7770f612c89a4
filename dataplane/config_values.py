"""Felix's spellings of configuration values, parsed.

Each parser takes the raw string Felix sends and returns the typed value
or raises ValueError with a short reason; :func:`dataplane.config.parse_config`
adds the key and the value to the error. Durations as Go writes them
(``1m30s``), booleans as Felix's loader reads them, ports and ranges, the
mark mask, CIDR lists, log rates and prefixes.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "KEYS",
    "LOG_LEVELS",
    "LOG_RATE",
    "MIN_MARK_BITS",
    "ProtoPort",
    "failsafes",
    "status_path_prefix",
]


@dataclass(frozen=True, slots=True)
class ProtoPort:
    """A failsafe port: protocol, port and the peer network it applies to."""

    protocol: str
    port: int
    net: str = ""  # empty: any address


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _seconds(raw: str) -> float:
    """Float seconds ("90", "2.5") or a Go duration ("1m30s", "500ms")."""
    text = raw.strip()
    try:
        value = float(text)
    except ValueError:
        parts = _DURATION_PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ValueError("not a number of seconds or a duration like 1m30s") from None
        value = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    if not value >= 0:  # also rejects NaN
        raise ValueError("must be zero or positive")
    return value


_TRUE = {"true", "t", "yes", "y", "1", "on"}
_FALSE = {"false", "f", "no", "n", "0", "off"}


def _bool(raw: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("not a boolean")


def _int(raw: str) -> int:
    return int(raw.strip(), 0)


def _choice(*allowed: str, upper: bool = False) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        text = raw.strip().upper() if upper else raw.strip().lower()
        if text not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return text

    return parse


def _prefixes(raw: str) -> tuple[str, ...]:
    items = tuple(p.strip() for p in raw.split(",") if p.strip())
    if not items:
        raise ValueError("needs at least one interface prefix")
    for item in items:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,14}", item):
            raise ValueError(f"{item!r} is not a usable interface name prefix")
    return items


def _port(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} out of range")
    return port


def failsafes(raw: str) -> tuple[ProtoPort, ...]:
    """Felix's "proto:port" / "proto:net:port" / "port" list, or "none"."""
    text = raw.strip()
    if text.lower() in ("", "none"):
        return ()
    out = []
    for item in (i.strip() for i in text.split(",")):
        parts = item.split(":")
        protocol, net = "tcp", ""
        if len(parts) == 2:
            protocol = parts[0]
        elif len(parts) >= 3:
            protocol, net = parts[0], ":".join(parts[1:-1]).strip("[]")
            net = str(ipaddress.ip_network(net, strict=False))
        protocol = protocol.lower()
        if protocol not in ("tcp", "udp", "sctp"):
            raise ValueError(f"protocol {protocol!r} in {item!r} is not tcp, udp or sctp")
        out.append(ProtoPort(protocol, _port(parts[-1]), net))
    return tuple(out)


def _port_range(raw: str) -> tuple[int, int]:
    first, sep, last = raw.strip().partition(":")
    if not sep:
        first, sep, last = raw.strip().partition("-")
    lo, hi = _port(first), _port(last if sep else first)
    if lo > hi:
        raise ValueError("range start is above its end")
    return lo, hi


def _optional_port_range(raw: str) -> tuple[int, int] | None:
    return _port_range(raw) if raw.strip() else None


def _port_ranges(raw: str) -> tuple[tuple[int, int], ...]:
    return tuple(_port_range(r) for r in raw.split(",") if r.strip())


# Marks the iptables renderers carve out of IptablesMarkMask (policy
# accept/pass, scratch bits, services, masquerade, drop...): checked here,
# at the edge, so a mask too narrow is refused with the ConfigUpdate
# rather than failing every apply later (dataplane.linux.rules.marks checks the
# same number).
MIN_MARK_BITS = 10


def _mark_mask(raw: str) -> int:
    value = _int(raw)
    if not 0 < value <= 0xFFFFFFFF:
        raise ValueError("must be a non-zero 32-bit mask")
    if bin(value).count("1") < MIN_MARK_BITS:
        raise ValueError(f"needs at least {MIN_MARK_BITS} bits for policy and service marks")
    return value


def _positive_int(raw: str) -> int:
    value = _int(raw)
    if value <= 0:
        raise ValueError("must be positive")
    return value


def _vni(raw: str) -> int:
    value = _int(raw)
    if not 0 <= value < 1 << 24:
        raise ValueError("a VXLAN VNI is 24 bits: 0..16777215")
    return value


def _udp_port(raw: str) -> int:
    value = _int(raw)
    if not 0 < value < 1 << 16:
        raise ValueError("must be 1..65535")
    return value


def _mtu(raw: str) -> int:
    value = _int(raw)
    if value != 0 and not 576 <= value <= 65535:
        raise ValueError("0 (from the parent interface) or 576..65535")
    return value


def _cidrs(raw: str) -> tuple[str, ...]:
    """Comma-separated networks, canonical (they go into an IP set)."""
    return tuple(
        str(ipaddress.ip_network(part.strip(), strict=False))
        for part in raw.split(",")
        if part.strip()
    )


def _route_protocol(raw: str) -> int:
    value = _int(raw)
    if not 0 < value < 256:
        raise ValueError("must be 1..255")
    return value


# Felix's severities as logging levels; NONE silences even CRITICAL.
LOG_LEVELS = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "CRITICAL": logging.CRITICAL,
    "NONE": logging.CRITICAL + 10,
}


def _log_severity(raw: str) -> str:
    text = raw.strip().upper()
    aliases = {"WARN": "WARNING", "FATAL": "CRITICAL", "PANIC": "CRITICAL", "TRACE": "DEBUG"}
    text = aliases.get(text, text)
    if text not in LOG_LEVELS:
        raise ValueError("not a log severity")
    return text


def _enabled(raw: str) -> bool:
    """Felix's ``oneof(Enabled,Disabled)``, any case."""
    text = raw.strip().lower()
    if text not in ("enabled", "disabled"):
        raise ValueError("Enabled or Disabled")
    return text == "enabled"


def _optional_ipv4(raw: str) -> str:
    """One IPv4 address, or "" for none (it goes into an SNAT rule)."""
    text = raw.strip()
    return str(ipaddress.IPv4Address(text)) if text else ""


def _regexp(raw: str) -> str:
    """A regular expression (Felix's ``regexp``: Go's RE2 syntax, which Python
    reads alike for what interface patterns use)."""
    try:
        re.compile(raw)
    except re.error as exc:
        raise ValueError(f"not a regular expression: {exc}") from None
    return raw


def _iface_param(raw: str) -> str:
    """An interface name as Felix's ``iface-param`` allows one, or "" for none
    (it goes into a rule's ``-o``)."""
    text = raw.strip()
    if text and not re.fullmatch(r"[a-zA-Z0-9:._+-]{1,15}", text):
        raise ValueError("an interface name: 1-15 of a-z A-Z 0-9 : . _ + -")
    return text


# Felix's log-rate: N/second (minute, hour, day), N from 1 to 9999. The
# rule serialisers check a Limit's rate against it again before writing.
LOG_RATE = re.compile(r"[1-9]\d{0,3}/(second|minute|hour|day)")


def _log_rate(raw: str) -> str:
    """A :data:`LOG_RATE`, or "" for no limit."""
    text = raw.strip()
    if text and not LOG_RATE.fullmatch(text):
        raise ValueError("N/second, N/minute, N/hour or N/day, N from 1 to 9999")
    return text


def _log_burst(raw: str) -> int:
    value = int(raw.strip())
    if not 0 <= value <= 9999:
        raise ValueError("from 0 to 9999")
    return value


def _text(raw: str) -> str:
    return raw.strip()


def status_path_prefix(raw: str) -> str:
    """An absolute directory, or "" for none (it becomes a path we write under)."""
    text = raw.strip()
    if text and (not text.startswith("/") or "\0" in text or "\n" in text):
        raise ValueError("an absolute path, or empty for none")
    return text


def _source_vips(raw: str) -> tuple[str, ...]:
    """At most one address per family, comma-separated: they go into HNS load balancers."""
    vips = tuple(str(ipaddress.ip_address(part.strip())) for part in raw.split(",") if part.strip())
    if len({":" in v for v in vips}) != len(vips):
        raise ValueError("at most one IPv4 and one IPv6 address")
    return vips


def _log_prefix(raw: str) -> str:
    # It goes into --log-prefix "<prefix>: ", which the kernel caps at 29
    # bytes; Felix's own validation allows this alphabet.
    text = raw.strip()
    if not re.fullmatch(r"[A-Za-z0-9%: /_.-]{0,27}", text):
        raise ValueError("at most 27 of A-Z a-z 0-9 % : / _ . - and space")
    return text


# Felix key -> (Config attribute, parser): every key the driver reads.
KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "InterfacePrefix": ("interface_prefixes", _prefixes),
    "IptablesRefreshInterval": ("iptables_refresh_interval", _seconds),
    "RouteRefreshInterval": ("route_refresh_interval", _seconds),
    "IpsetsRefreshInterval": ("ipsets_refresh_interval", _seconds),
    "EndpointRefreshInterval": ("endpoint_refresh_interval", _seconds),
    "ReportingIntervalSecs": ("reporting_interval", _seconds),
    "LogSeverityScreen": ("log_severity", _log_severity),
    "Ipv6Support": ("ipv6_support", _bool),
    "ChainInsertMode": ("chain_insert_mode", _choice("insert", "append")),
    "DefaultEndpointToHostAction": (
        "default_endpoint_to_host_action",
        _choice("DROP", "RETURN", "ACCEPT", upper=True),
    ),
    "IptablesBackend": ("iptables_backend", _choice("auto", "legacy", "nft")),
    "NFTablesMode": ("nftables_mode", _choice("disabled", "enabled", "auto")),
    "IptablesMarkMask": ("iptables_mark_mask", _mark_mask),
    "IptablesFilterAllowAction": (
        "iptables_filter_allow_action",
        _choice("ACCEPT", "RETURN", upper=True),
    ),
    "IptablesMangleAllowAction": (
        "iptables_mangle_allow_action",
        _choice("ACCEPT", "RETURN", upper=True),
    ),
    "IptablesFilterDenyAction": (
        "iptables_filter_deny_action",
        _choice("DROP", "REJECT", upper=True),
    ),
    "LogPrefix": ("log_prefix", _log_prefix),
    "FailsafeInboundHostPorts": ("failsafe_inbound_host_ports", failsafes),
    "FailsafeOutboundHostPorts": ("failsafe_outbound_host_ports", failsafes),
    "NATPortRange": ("nat_port_range", _optional_port_range),
    "KubeNodePortRanges": ("kube_node_port_ranges", _port_ranges),
    "DeviceRouteProtocol": ("device_route_protocol", _route_protocol),
    "MaxIpsetSize": ("max_ipset_size", _positive_int),
    "FelixHostname": ("felix_hostname", _text),
    "VXLANVNI": ("vxlan_vni", _vni),
    "VXLANPort": ("vxlan_port", _udp_port),
    "VXLANMTU": ("vxlan_mtu", _mtu),
    "VXLANMTUV6": ("vxlan_mtu_v6", _mtu),
    "VXLANEnabled": ("vxlan_enabled", _bool),
    "VXLANEnabledV6": ("vxlan_enabled_v6", _bool),
    "IpInIpEnabled": ("ipip_enabled", _bool),
    "AllowVXLANPacketsFromWorkloads": ("allow_vxlan_packets_from_workloads", _bool),
    "AllowIPIPPacketsFromWorkloads": ("allow_ipip_packets_from_workloads", _bool),
    "ExternalNodesCIDRList": ("external_nodes_cidrs", _cidrs),
    "NATOutgoingExclusions": (
        "nat_outgoing_exclusions",
        _choice("ippoolsonly", "ippoolsandhostips"),
    ),
    "WindowsServiceSourceVIP": ("windows_source_vips", _source_vips),
    "WindowsServiceDSR": ("windows_dsr", _bool),
    "EndpointStatusPathPrefix": ("endpoint_status_path_prefix", status_path_prefix),
    "FloatingIPs": ("floating_ips", _enabled),
    "DisableConntrackInvalidCheck": ("disable_conntrack_invalid_check", _bool),
    "IPForwarding": ("ip_forwarding", _enabled),
    "NATOutgoingAddress": ("nat_outgoing_address", _optional_ipv4),
    "IptablesNATOutgoingInterfaceFilter": ("nat_outgoing_interface_filter", _iface_param),
    "MTUIfacePattern": ("mtu_iface_pattern", _regexp),
    "RequireMTUFile": ("require_mtu_file", _bool),
    "LogActionRateLimit": ("log_action_rate_limit", _log_rate),
    "LogActionRateLimitBurst": ("log_action_rate_limit_burst", _log_burst),
}
