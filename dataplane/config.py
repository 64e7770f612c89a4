"""Typed driver configuration, parsed from Felix's ``ConfigUpdate``.

Felix sends its whole raw configuration as a string map. We keep the keys
this driver acts on, with Felix's names and defaults, in one frozen
:class:`Config`. Unknown keys are ignored (Felix has hundreds); a known key
with a value we cannot parse raises :class:`ConfigError` naming the key and
the value, and the whole update is rejected so a half-applied config never
exists. Keys are matched case-insensitively, as Felix's own loader does.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from dataplane.errors import ConfigError
from dataplane.felix_settings import RefusedSetting, refused_settings

__all__ = ["LOG_LEVELS", "Config", "ProtoPort", "felix_keys", "parse_config"]


@dataclass(frozen=True, slots=True)
class ProtoPort:
    """A failsafe port: protocol, port and the peer network it applies to."""

    protocol: str
    port: int
    net: str = ""  # empty: any address


def _default_inbound() -> tuple[ProtoPort, ...]:
    return _failsafes("tcp:22,udp:68,tcp:179,tcp:2379,tcp:2380,tcp:5473,tcp:6443,tcp:6666,tcp:6667")


def _default_outbound() -> tuple[ProtoPort, ...]:
    return _failsafes("udp:53,udp:67,tcp:179,tcp:2379,tcp:2380,tcp:5473,tcp:6443,tcp:6666,tcp:6667")


@dataclass(frozen=True, slots=True)
class Config:
    """The configuration the driver acts on. Defaults are Felix's."""

    interface_prefixes: tuple[str, ...] = ("cali",)
    iptables_refresh_interval: float = 90.0
    route_refresh_interval: float = 90.0
    ipsets_refresh_interval: float = 10.0
    # Windows: re-read HNS and repair endpoints whose ACLs someone changed.
    endpoint_refresh_interval: float = 90.0
    reporting_interval: float = 30.0
    log_severity: str = "INFO"
    ipv6_support: bool = True
    chain_insert_mode: str = "insert"
    default_endpoint_to_host_action: str = "DROP"
    iptables_backend: str = "auto"
    # Felix's NFTablesMode: "disabled" (iptables), "enabled" (native
    # nftables) or "auto" (nftables where the kernel has it and no
    # iptables rules of ours are present); see linux/nftables/mode.py.
    nftables_mode: str = "disabled"
    iptables_mark_mask: int = 0xFFFF0000
    iptables_filter_allow_action: str = "ACCEPT"
    iptables_mangle_allow_action: str = "ACCEPT"
    iptables_filter_deny_action: str = "DROP"
    log_prefix: str = "calico-packet"
    failsafe_inbound_host_ports: tuple[ProtoPort, ...] = field(default_factory=_default_inbound)
    failsafe_outbound_host_ports: tuple[ProtoPort, ...] = field(default_factory=_default_outbound)
    nat_port_range: tuple[int, int] | None = None
    kube_node_port_ranges: tuple[tuple[int, int], ...] = ((30000, 32767),)
    device_route_protocol: int = 3
    max_ipset_size: int = 1048576
    felix_hostname: str = ""
    # The VXLAN network identifier of the overlay (on Windows, the
    # RemoteSubnetRoutes' IsolationId).
    vxlan_vni: int = 4096
    # The overlay's UDP port and device MTUs (0: the parent interface's MTU
    # less the VXLAN overhead, 50 bytes over IPv4 and 70 over IPv6).
    vxlan_port: int = 4789
    vxlan_mtu: int = 0
    vxlan_mtu_v6: int = 0
    # Whether the VXLAN devices exist. None: as the IP pools say (Felix's
    # Encapsulation message); Felix sets the key only to override that.
    vxlan_enabled: bool | None = None
    vxlan_enabled_v6: bool | None = None
    ipip_enabled: bool | None = None
    # Encapsulated packets from pods are dropped unless these allow them:
    # the encapsulation could carry traffic past the pod's egress policy.
    allow_vxlan_packets_from_workloads: bool = False
    allow_ipip_packets_from_workloads: bool = False
    # Addresses outside the cluster that may also send VXLAN to this node
    # (Felix's ExternalNodesCIDRList).
    external_nodes_cidrs: tuple[str, ...] = ()
    # NAT-outgoing never masquerades to the pools; with "IPPoolsAndHostIPs"
    # not to any node's address either.
    nat_outgoing_exclusions: str = "ippoolsonly"
    # Windows services: the source VIP of the HNS load balancers, one per
    # family (kube-proxy winkernel's --source-vip; required on Overlay
    # networks), and Direct Server Return for cluster IPs (--enable-dsr).
    windows_source_vips: tuple[str, ...] = ()
    windows_dsr: bool = False
    # Where endpoint-status files go (<prefix>/endpoint-status/), for the CNI
    # plugin and confd; Felix's default from v3.30, "" for none. Under Felix
    # the driver writes them (dataplane/core/status_files.py).
    endpoint_status_path_prefix: str = "/var/run/calico"
    # Felix's FloatingIPs: an endpoint's ipv4_nat/ipv6_nat (floating IPs) are
    # programmed only when Enabled, or for an OpenStack endpoint, as Felix's
    # floating IP manager does.
    floating_ips: bool = False
    # Felix's DisableConntrackInvalidCheck: true stops dropping what
    # conntrack marks INVALID (asymmetric routing through the node).
    disable_conntrack_invalid_check: bool = False
    # Felix's IPForwarding: Enabled turns the node's IPv4 (and IPv6)
    # forwarding on at start; Disabled leaves it as found (takes a restart,
    # as Felix restarts for it).
    ip_forwarding: bool = True
    # Felix's NATOutgoingAddress: NAT outgoing (IPv4) SNATs to this address
    # instead of masquerading; "" for the outgoing interface's address.
    nat_outgoing_address: str = ""
    # Felix's IptablesNATOutgoingInterfaceFilter: NAT outgoing only for
    # traffic leaving by this interface (a trailing + matches a prefix).
    nat_outgoing_interface_filter: str = ""
    # Felix's MTUIfacePattern: the interfaces whose smallest MTU is the
    # host's (the pod MTU in the MTU file derives from it), and
    # RequireMTUFile: an apply that cannot write that file fails.
    mtu_iface_pattern: str = r"^((en|wl|ww|sl|ib)[Pcopsvx].*|(eth|wlan|wwan).*)"
    require_mtu_file: bool = False
    # Felix's LogActionRateLimit ("" for none) and LogActionRateLimitBurst.
    log_action_rate_limit: str = ""
    log_action_rate_limit_burst: int = 5
    # Keys Felix's Linux dataplane acts on that this driver does not, sent
    # with a value that matters (dataplane/felix_settings.py): programmed as
    # with Felix's default, each said once and shown by ``show``.
    refused: tuple[RefusedSetting, ...] = ()


# ---------------------------------------------------------------------------
# Value parsers. Each takes the raw string and returns the typed value or
# raises ValueError with a short reason; parse_config adds key and value.
# ---------------------------------------------------------------------------

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


def _failsafes(raw: str) -> tuple[ProtoPort, ...]:
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


# Felix key -> (Config attribute, parser).
_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
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
    "FailsafeInboundHostPorts": ("failsafe_inbound_host_ports", _failsafes),
    "FailsafeOutboundHostPorts": ("failsafe_outbound_host_ports", _failsafes),
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
_KEYS_LOWER = {k.lower(): (k, v) for k, v in _KEYS.items()}


def felix_keys() -> list[tuple[str, str, object]]:
    """(Felix's key, Config field, default) of every key the driver reads."""
    defaults = Config()
    return [(key, field, getattr(defaults, field)) for key, (field, _read) in _KEYS.items()]


assert {a for a, _ in _KEYS.values()} <= {f.name for f in fields(Config)}


def parse_config(raw: Mapping[str, str], base: Config | None = None) -> Config:
    """Build a :class:`Config` from Felix's raw key/value map.

    Keys absent from ``raw`` take their value from ``base`` (Felix's
    defaults when ``base`` is None). Raises :class:`ConfigError` on the
    first invalid value, naming the key and the value. Keys the driver
    refuses (:func:`~dataplane.felix_settings.refused_settings`) are noted
    in :attr:`Config.refused`, never an error.
    """
    base = base or Config()
    sent = {key.lower() for key in raw}
    kept = tuple(r for r in base.refused if r.key.lower() not in sent)
    changes: dict[str, Any] = {
        "refused": tuple(sorted(kept + refused_settings(raw), key=lambda r: r.key))
    }
    for key in sorted(raw):
        entry = _KEYS_LOWER.get(key.lower())
        if entry is None:
            continue
        name, (attr, parser) = entry
        value = raw[key]
        try:
            changes[attr] = parser(value)
        except ValueError as exc:
            raise ConfigError(f"config[{name}]", value, str(exc)) from None
    return replace(base, **changes)
