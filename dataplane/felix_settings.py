"""What the driver does with each Felix setting its own dataplanes act on.

Felix's ``ConfigUpdate`` carries every key someone set. Of Felix's ~220
settings, ``felix/dataplane/driver.go`` hands about 155 to Felix's own
Linux dataplane (``driver_windows.go`` a handful to Windows'); the rest
are Felix's own business (its datastore, Typha, logging, health, the
calculation graph) and never reach a dataplane. For every key a dataplane
of Felix's reads, this table says what this driver does instead:

* :class:`Honoured`: the driver acts on it as Felix does; the test that
  proves it is named.
* :class:`NotForPlatform`: it belongs to a part of Felix this driver is
  not (the eBPF dataplane, WireGuard, XDP, Felix's own process), or only
  tunes a feature the driver refuses elsewhere; why.
* :class:`NotNeeded`: what it tunes, the driver does another way (netlink
  notifications instead of a periodic re-read, say); why.
* :class:`Refused`: Felix's Linux dataplane acts on it and this driver
  does not. Any value but the harmless ones (Felix's default, unless the
  entry says otherwise) is refused: one WARNING line when it arrives and a
  ``setting`` record in ``show``, with the reason; the node is programmed
  as with the default.

``docs/felix-parity.md`` is generated from this table and from each Felix
release's source, and ``tests/test_felix_parity.py`` fails when a release
has a key a dataplane of Felix's reads that this table does not name.
Keys the driver reads are listed in :mod:`dataplane.config_values`; they are
:class:`Honoured` here too.
"""

from __future__ import annotations

from collections.abc import Mapping

from dataplane.felix_dispositions import (
    Disposition,
    Honoured,
    NotForPlatform,
    NotNeeded,
    Refused,
    RefusedSetting,
)

__all__ = [
    "BPF",
    "DRIVER_KEYS",
    "SETTINGS",
    "WIREGUARD",
    "Disposition",
    "Honoured",
    "NotForPlatform",
    "NotNeeded",
    "Refused",
    "RefusedSetting",
    "disposition",
    "refused_settings",
]


def _empty(value: str) -> bool:
    return not value.strip()


def _no_openstack(value: str) -> bool:
    return "openstack" not in value.lower()


def _false(value: str) -> bool:
    return value.strip().lower() in ("", "false", "0", "no", "off")


def _zero(value: str) -> bool:
    try:
        return float(value.strip() or "0") == 0
    except ValueError:
        return False


BPF = NotForPlatform(
    "Felix's eBPF dataplane (BPFEnabled); this driver programs iptables or nftables"
)
WIREGUARD = NotForPlatform("WireGuard (WireguardEnabled), which this driver does not build")
_XDP = NotForPlatform(
    "XDP acceleration of untracked deny rules: this driver writes them to the raw table,"
    " as Felix does where XDP is unavailable"
)
_FELIX_DEBUG = NotForPlatform("a debugging hook of Felix's internal dataplane")
_LOCK = NotForPlatform(
    "the xtables lock of iptables-legacy tools run beside Felix's own; this driver runs"
    " iptables-restore with --wait"
)
_ROUTE_PRIORITY = "route metrics (priorities) for workload routes during live migration"
_NFT_ACTIONS = (
    "on nftables this driver takes the Iptables* action keys (IptablesFilterAllowAction, ...)"
)

_K = "tests/kernel/"
_L = "tests/linux/"
_E = "tests/test_settings_effects.py::"

# Keys the driver reads and acts on, each with the test that proves it.
_HONOURED: Mapping[str, Honoured] = {
    "ChainInsertMode": Honoured(_E + "test_chain_insert_mode_append_puts_our_jump_last"),
    "IptablesMarkMask": Honoured(_E + "test_iptables_mark_mask_confines_every_mark_our_rules_use"),
    "LogPrefix": Honoured(_E + "test_log_prefix_labels_a_log_rule"),
    "FailsafeOutboundHostPorts": Honoured(
        _E + "test_failsafe_outbound_host_ports_fill_the_failsafe_out_chain"
    ),
    "NATPortRange": Honoured(_E + "test_nat_port_range_limits_masquerade_ports"),
    "NATOutgoingExclusions": Honoured(
        _E + "test_nat_outgoing_exclusions_ip_pools_and_host_ips_spares_node_addresses"
    ),
    "AllowIPIPPacketsFromWorkloads": Honoured(
        _E + "test_allow_ipip_packets_from_workloads_removes_the_ipip_drop"
    ),
    "VXLANMTU": Honoured(_E + "test_vxlan_mtu_sets_the_planned_device_mtu"),
    "VXLANEnabledV6": Honoured(_E + "test_vxlan_enabled_v6_forces_the_v6_overlay_on"),
    "LogSeverityScreen": Honoured(_E + "test_log_severity_screen_sets_the_dataplane_log_level"),
    "WindowsServiceDSR": Honoured(_E + "test_windows_service_dsr_flags_the_load_balancers_dsr"),
    "FailsafeInboundHostPorts": Honoured(
        _E + "test_failsafe_inbound_host_ports_replace_the_failsafe_in_ports"
    ),
    "VXLANPort": Honoured(_E + "test_vxlan_port_sets_the_planned_device_port"),
    "Ipv6Support": Honoured(_E + "test_ipv6_support_false_programs_no_ipv6_rules_or_sets"),
    "InterfacePrefix": Honoured(_L + "test_render.py::test_static_chains_golden"),
    "IptablesRefreshInterval": Honoured(
        _K + "test_linux_policy.py::test_tampering_is_repaired_within_a_refresh_interval",
        "unset, 90 s (Felix's default is 180 s); on nftables too",
    ),
    "RouteRefreshInterval": Honoured(
        _K + "test_overlay.py::test_tampering_is_repaired_within_a_refresh_interval"
    ),
    "IpsetsRefreshInterval": Honoured(
        _K + "test_linux_policy.py::test_tampering_is_repaired_within_a_refresh_interval",
        "unset, 10 s (Felix's default is 90 s)",
    ),
    "EndpointRefreshInterval": Honoured(
        "tests/windows/test_platform.py::test_acls_changed_behind_our_back_are_repaired_at_refresh"
    ),
    "ReportingIntervalSecs": Honoured(
        "tests/test_loop.py::test_heartbeat_follows_reporting_interval"
    ),
    "DefaultEndpointToHostAction": Honoured(_L + "test_render.py::test_static_chains_golden"),
    "IptablesBackend": Honoured(_K + "test_linux_policy.py::test_connectivity_matrix_v4_and_v6"),
    "NFTablesMode": Honoured(
        _K + "test_nftables_mode.py::test_switching_both_ways_leaves_nothing_of_the_other"
    ),
    "KubeNodePortRanges": Honoured(
        "tests/kube/test_source.py::"
        "test_a_new_node_port_range_takes_a_service_refused_under_the_old_one"
    ),
    "MaxIpsetSize": Honoured(
        _K + "test_metrics_kernel.py::test_object_errors_name_what_the_kernel_refused"
    ),
    "FelixHostname": Honoured(
        _K + "test_overlay.py::test_pods_reach_pods_on_the_other_node_only_through_vxlan"
    ),
    "VXLANVNI": Honoured(
        "tests/windows/test_vxlan_routes.py::test_remote_vxlan_blocks_become_routes_one_call_each"
    ),
    "VXLANMTUV6": Honoured(
        _L + "test_overlay_plan.py::test_ipv6_uses_its_own_device_mac_and_overhead"
    ),
    "VXLANEnabled": Honoured(
        _L + "test_overlay_plan.py::test_vxlan_off_plans_nothing_and_config_overrides_the_pools"
    ),
    "AllowVXLANPacketsFromWorkloads": Honoured(
        _E + "test_allow_vxlan_packets_from_workloads_removes_the_vxlan_drop",
        "its default with packets: " + _K + "test_overlay.py::"
        "test_pods_cannot_send_vxlan_and_strangers_cannot_inject_it",
    ),
    "ExternalNodesCIDRList": Honoured(
        _L + "test_overlay_plan.py::test_external_nodes_may_send_vxlan"
    ),
    "WindowsServiceSourceVIP": Honoured(
        "tests/windows/test_service_problems.py::"
        "test_no_source_vip_is_said_at_start_and_as_services_arrive"
    ),
    "EndpointStatusPathPrefix": Honoured(
        "tests/test_status_files_under_felix.py::"
        "test_status_files_match_the_programmed_workloads_across_a_restart"
    ),
}

# Keys Felix's dataplanes read, by key. BPF* and Wireguard* keys not named
# here follow their family's entry (see :func:`disposition`).
SETTINGS: Mapping[str, Disposition] = {
    **_HONOURED,
    "IptablesFilterAllowAction": Refused(
        "policy's allow verdicts are always ACCEPT (only the overlay's rules take it)", "ACCEPT"
    ),
    "IptablesFilterDenyAction": Refused(
        "policy's deny verdicts are always DROP (only the overlay's rules take it)", "DROP"
    ),
    "IptablesMangleAllowAction": Refused(
        "allow verdicts in the mangle table are always ACCEPT", "ACCEPT"
    ),
    "DeviceRouteProtocol": Refused(
        "routes to workloads are written with the driver's own protocol number (80), by"
        " which it finds them again",
        "3",
    ),
    "IpInIpEnabled": Refused(
        "no IPIP device is built (IPIP is not supported; use a VXLAN pool)", "", harmless=_false
    ),
    "AWSSrcDstCheck": Refused(
        "the driver does not call the AWS API; set the instance's source/destination check"
        " yourself",
        "DoNothing",
    ),
    "ClusterType": Refused(
        "OpenStack's metadata-server rules are not implemented (only an 'openstack' cluster"
        " type changes what Felix writes)",
        "",
        harmless=_no_openstack,
    ),
    "DataplaneDriver": NotForPlatform("Felix's own: it starts the driver this names"),
    "UseInternalDataplaneDriver": NotForPlatform(
        "Felix's own: false is what makes Felix start this driver"
    ),
    "DataplaneWatchdogTimeout": NotForPlatform(
        "the watchdog of Felix's internal dataplane loop; the driver reports its own liveness"
        " on /health"
    ),
    "DebugBPFCgroupV2": BPF,
    "DebugBPFMapRepinEnabled": BPF,
    "DebugMemoryProfilePath": _FELIX_DEBUG,
    "DebugSimulateDataplaneApplyDelay": _FELIX_DEBUG,
    "DebugSimulateDataplaneHangAfter": _FELIX_DEBUG,
    "DeviceRouteSourceAddress": Refused(
        "workload routes are written without a preferred source address", "", harmless=_empty
    ),
    "DeviceRouteSourceAddressIPv6": Refused(
        "workload routes are written without a preferred source address", "", harmless=_empty
    ),
    "DisableConntrackInvalidCheck": Honoured(
        _E + "test_disable_conntrack_invalid_check_stops_dropping_invalid_packets"
    ),
    "FeatureDetectOverride": Refused(
        "the driver detects the kernel's and tools' features itself", "", harmless=_empty
    ),
    "FeatureGates": Refused("no feature gate is implemented", "", harmless=_empty),
    "FloatingIPs": Honoured(
        _K + "test_linux_endpoints.py::test_floating_ip_reaches_the_pod",
        "Disabled: " + _E + "test_floating_ips_disabled_programs_no_floating_ip",
    ),
    "FlowLogsGoldmaneServer": Refused(
        "flow logs are not produced (no Goldmane client)", "", harmless=_empty
    ),
    "GenericXDPEnabled": _XDP,
    "XDPEnabled": _XDP,
    "XDPRefreshInterval": _XDP,
    "IPForwarding": Honoured(_E + "test_ip_forwarding_disabled_leaves_the_nodes_forwarding_alone"),
    "IPv4ElevatedRoutePriority": Refused(_ROUTE_PRIORITY + " are not implemented", "512"),
    "IPv4NormalRoutePriority": Refused(_ROUTE_PRIORITY + " are not implemented", "1024"),
    "IPv6ElevatedRoutePriority": Refused(_ROUTE_PRIORITY + " are not implemented", "512"),
    "IPv6NormalRoutePriority": Refused(_ROUTE_PRIORITY + " are not implemented", "1024"),
    "LiveMigrationRouteConvergenceTime": NotForPlatform(
        "KubeVirt live migration, which the driver does not implement"
    ),
    "IPv4VXLANTunnelAddr": NotNeeded(
        "the node's own VXLAN address comes from its VXLANTunnelEndpointUpdate"
    ),
    "IPv6VXLANTunnelAddr": NotNeeded(
        "the node's own VXLAN address comes from its VXLANTunnelEndpointUpdate"
    ),
    "InterfaceExclude": Refused(
        "the driver only manages interfaces with the workload prefixes; host interfaces"
        " excluded from host-endpoint matching are not configurable",
        "kube-ipvs0",
    ),
    "InterfaceRefreshInterval": NotNeeded(
        "interfaces are followed by netlink notifications, with no periodic re-read"
    ),
    "IpInIpMtu": Refused("no IPIP device is built (IPIP is not supported)", "0", harmless=_zero),
    "IpInIpTunnelAddr": Refused(
        "no IPIP device is built (IPIP is not supported)", "", harmless=_empty
    ),
    "IptablesLockFilePath": _LOCK,
    "IptablesLockProbeIntervalMillis": _LOCK,
    "IptablesLockTimeoutSecs": _LOCK,
    "IptablesNATOutgoingInterfaceFilter": Honoured(
        _E + "test_iptables_nat_outgoing_interface_filter_limits_nat_to_one_interface"
    ),
    "IptablesPostWriteCheckIntervalSecs": Refused(
        "tables are re-read on the refresh interval only, not shortly after each write", "5"
    ),
    "IstioAmbientMode": Refused("Istio ambient mode is not implemented", "Disabled"),
    "IstioDSCPMark": NotForPlatform("Istio ambient mode, which the driver does not implement"),
    "LocalSubnetL2Reachability": Refused(
        "proxy ARP/NDP for local-subnet load balancer addresses is not implemented", "Disabled"
    ),
    "LocalSubnetL2ReachabilityRefreshInterval": NotForPlatform(
        "proxy ARP/NDP for local-subnet load balancer addresses (LocalSubnetL2Reachability),"
        " which the driver does not implement"
    ),
    "LogActionRateLimit": Honoured(_E + "test_log_action_rate_limit_limits_log_rules"),
    "LogActionRateLimitBurst": Honoured(_E + "test_log_action_rate_limit_limits_log_rules"),
    "MTUIfacePattern": Honoured(
        "tests/kernel/test_mtu_file.py::"
        "test_the_pod_mtu_follows_the_hosts_interfaces_and_the_overlay",
        "the host MTU of the pod MTU file the driver writes for the CNI plugin (--mtu-file)",
    ),
    "RequireMTUFile": Honoured(
        "tests/linux/test_mtu_file.py::"
        "test_written_when_it_changes_and_a_failure_fails_the_apply_only_when_required",
        "a failed write of the MTU file fails the apply (retried), as Felix will not start",
    ),
    "MetadataAddr": NotForPlatform("OpenStack's metadata server (see ClusterType)"),
    "MetadataPort": NotForPlatform("OpenStack's metadata server (see ClusterType)"),
    "NATOutgoingAddress": Honoured(
        _E + "test_nat_outgoing_address_snats_to_it_instead_of_masquerading"
    ),
    "NFTablesFlowTableDataIfacePattern": Refused(
        "nftables flowtable offload is not implemented", "", harmless=_empty
    ),
    "NFTablesFlowTableOffload": Refused(
        "nftables flowtable offload is not implemented", "Disabled"
    ),
    "NetlinkTimeoutSecs": Refused("netlink requests are not given a timeout of their own", "10"),
    "NftablesFilterAllowAction": Refused(_NFT_ACTIONS, "ACCEPT"),
    "NftablesRefreshInterval": Refused(
        "on nftables this driver takes IptablesRefreshInterval", "180"
    ),
    "NftablesFilterDenyAction": Refused(_NFT_ACTIONS, "DROP"),
    "NftablesMangleAllowAction": Refused(_NFT_ACTIONS, "ACCEPT"),
    "NftablesMarkMask": Refused("on nftables this driver takes IptablesMarkMask", "0xffff0000"),
    "ProgramClusterRoutes": Refused(
        "routes to other nodes' blocks without encapsulation are left to BIRD (the driver"
        " programs VXLAN's only)",
        "EnabledIPIPOnly",
        harmless=lambda v: v.strip().lower() != "enabled",
    ),
    "PrometheusGoMetricsEnabled": NotForPlatform(
        "Felix's Go runtime metrics; the driver serves its own on --listen"
    ),
    "PrometheusProcessMetricsEnabled": NotForPlatform(
        "Felix's process metrics; the driver serves its own on --listen"
    ),
    "PrometheusWireGuardMetricsEnabled": WIREGUARD,
    "RemoveExternalRoutes": Refused(
        "routes to workload interfaces that the driver did not write are left in place"
        " (as Felix with false)",
        "true",
        behaves_as="false",
    ),
    "RouteSource": NotNeeded(
        "Felix's calculation graph computes the RouteUpdates from it; the driver programs"
        " what they say"
    ),
    "RouteSyncDisabled": Refused("routes are always programmed", "false", harmless=_false),
    "RouteTableRange": Refused(
        "the driver writes to the main routing table only", "", harmless=_empty
    ),
    "RouteTableRanges": Refused(
        "the driver writes to the main routing table only", "", harmless=_empty
    ),
    "ServiceLoopPrevention": Refused(
        "traffic to service CIDRs with no service behind them is neither dropped nor"
        " rejected (as Felix with Disabled)",
        "Drop",
        behaves_as="Disabled",
    ),
    "SidecarAccelerationEnabled": Refused(
        "sidecar (sockmap) acceleration is not implemented", "false", harmless=_false
    ),
    "Variant": NotForPlatform("Felix's product variant; Calico's is assumed"),
    "WorkloadSourceSpoofing": NotNeeded(
        "Felix's calculation graph acts on it: an endpoint that asks to send from other"
        " addresses reaches the driver only with Any, and its allowed prefixes are honoured"
        " (WorkloadEndpoint.allow_spoofed_source_prefixes)"
    ),
    "BPFEnabled": Refused(
        "the eBPF dataplane is not implemented; iptables or nftables rules are programmed instead",
        "false",
        harmless=_false,
    ),
    "WireguardEnabled": Refused(
        "WireGuard is not implemented: traffic between nodes is not encrypted",
        "false",
        harmless=_false,
    ),
    "WireguardEnabledV6": Refused(
        "WireGuard is not implemented: traffic between nodes is not encrypted",
        "false",
        harmless=_false,
    ),
}


# Keys this driver reads that no Felix release's config_params.go has: its
# own, set in FelixConfiguration or the environment like any other.
DRIVER_KEYS = frozenset(
    {"EndpointRefreshInterval", "VXLANEnabledV6", "WindowsServiceDSR", "WindowsServiceSourceVIP"}
)


def disposition(key: str) -> Disposition | None:
    """What the driver does with ``key``, or None when no dataplane of Felix's reads it."""
    found = SETTINGS.get(key)
    if found is not None:
        return found
    if key.startswith("BPF"):
        return BPF
    if key.startswith("Wireguard"):
        return WIREGUARD
    return None


_LOWER = {key.lower(): key for key in SETTINGS}


def refused_settings(raw: Mapping[str, str]) -> tuple[RefusedSetting, ...]:
    """The keys of a ``ConfigUpdate`` whose values the driver refuses, sorted by key."""
    found = []
    for key, value in raw.items():
        name = _LOWER.get(key.lower())
        entry = SETTINGS.get(name) if name is not None else None
        if isinstance(entry, Refused) and entry.refuses(value):
            found.append(RefusedSetting(name or key, value, entry.why))
    return tuple(sorted(found, key=lambda r: r.key))
