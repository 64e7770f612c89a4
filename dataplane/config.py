"""Typed driver configuration, parsed from Felix's ``ConfigUpdate``.

Felix sends its whole raw configuration as a string map. We keep the keys
this driver acts on, with Felix's names and defaults, in one frozen
:class:`Config`. Unknown keys are ignored (Felix has hundreds); a known key
with a value we cannot parse raises :class:`ConfigError` naming the key and
the value, and the whole update is rejected so a half-applied config never
exists. Keys are matched case-insensitively, as Felix's own loader does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from dataplane.config_values import KEYS, ProtoPort, failsafes
from dataplane.errors import ConfigError
from dataplane.felix_settings import RefusedSetting, refused_settings

__all__ = ["Config", "ProtoPort", "felix_keys", "parse_config"]


def _default_inbound() -> tuple[ProtoPort, ...]:
    return failsafes("tcp:22,udp:68,tcp:179,tcp:2379,tcp:2380,tcp:5473,tcp:6443,tcp:6666,tcp:6667")


def _default_outbound() -> tuple[ProtoPort, ...]:
    return failsafes("udp:53,udp:67,tcp:179,tcp:2379,tcp:2380,tcp:5473,tcp:6443,tcp:6666,tcp:6667")


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


_KEYS_LOWER = {k.lower(): (k, v) for k, v in KEYS.items()}


def felix_keys() -> list[tuple[str, str, object]]:
    """(Felix's key, Config field, default) of every key the driver reads."""
    defaults = Config()
    return [(key, field, getattr(defaults, field)) for key, (field, _read) in KEYS.items()]


assert {a for a, _ in KEYS.values()} <= {f.name for f in fields(Config)}


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
