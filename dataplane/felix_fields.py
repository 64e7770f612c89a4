"""What the driver does with each field of each message Felix sends it.

Every message reachable from ``ToDataplane`` in every supported Felix
release's ``felixbackend.proto`` is named here, field by field, with the
same dispositions as the settings (:mod:`dataplane.felix_settings`):
honoured (with the test that proves it), not for this platform, not
needed, or refused. ``docs/felix-parity.md`` lists them beside what
Felix's own dataplanes switch on, and ``tests/test_felix_parity.py`` fails
when a release's proto has a field this table does not name.

A field is named by its own release's name (``WorkloadEndpoint.type`` is
v3.30's; :mod:`dataplane.wire.decode` maps older wires onto today's).
"""

from __future__ import annotations

from collections.abc import Mapping

from dataplane.felix_dispositions import (
    Disposition,
    Honoured,
    NotForPlatform,
    NotNeeded,
    Refused,
)

__all__ = ["FIELDS"]

_K = "tests/kernel/"
_DIFF = Honoured(_K + "test_differential.py::test_kernel_verdicts_equal_the_reference")
_MATRIX = Honoured(_K + "test_linux_policy.py::test_connectivity_matrix_v4_and_v6")
_UNTRACKED = Honoured(
    _K + "test_linux_policy.py::test_untracked_policy_bypasses_normal_policy_without_conntrack"
)
_PRE_DNAT = Honoured(_K + "test_linux_policy.py::test_pre_dnat_policy_drops_before_normal_policy")
_FORWARD = Honoured(
    _K
    + "test_host_endpoints.py::test_apply_on_forward_policy_judges_traffic_routed_to_and_from_pods"
)
_HOST = Honoured(
    _K
    + "test_host_endpoints.py::test_an_all_interfaces_host_endpoint_polices_the_host_not_its_pods"
)
_INACTIVE = Honoured(
    _K + "test_linux_endpoints.py::test_inactive_endpoint_gets_no_traffic_and_reports_down"
)
_FLOATING = Honoured(
    _K + "test_linux_endpoints.py::test_floating_ip_reaches_the_pod",
    "with FloatingIPs Enabled, or on an OpenStack endpoint, as Felix",
)
_SPOOF = Honoured(_K + "test_linux_endpoints.py::test_spoofed_source_addresses_are_dropped")
_NAT_OUT = Honoured(
    _K + "test_linux_policy.py::test_nat_outgoing_masquerades_only_masquerade_pools"
)
_OVERLAY = Honoured(
    _K + "test_overlay.py::test_pods_reach_pods_on_the_other_node_only_through_vxlan"
)
_SAME_SUBNET = Honoured(_K + "test_overlay.py::test_cross_subnet_on_one_subnet_goes_unencapsulated")
_NODE_GONE = Honoured(_K + "test_overlay.py::test_a_removed_node_leaves_nothing_behind")
_SERVICES = Honoured(
    _K + "test_linux_services.py::test_cluster_ip_spreads_evenly_and_affinity_pins"
)
_NODE_PORT = Honoured(
    _K + "test_linux_services.py::"
    "test_node_port_cluster_policy_masquerades_local_policy_keeps_client"
)
_RELEASES = Honoured(
    _K + "test_felix_releases.py::test_each_release_programs_the_masters_kernel_state_and_verdicts"
)
_CHANGES = Honoured(
    _K + "test_linux_policy.py::test_in_place_updates_follow_and_keep_established_connections"
)
_CONFIG = Honoured("tests/test_felix_parity.py::test_every_key_a_felix_dataplane_reads_is_named")
_SEQUENCE = Honoured("tests/test_wire_releases.py::test_detection_logs_once_which_format_and_why")
_IN_SYNC = Honoured("tests/test_loop.py::test_nothing_is_applied_before_in_sync_then_one_apply")

_RESOLVED = NotNeeded(
    "Felix resolves namespace and service-account selectors into the IP sets and profiles"
    " it sends; nothing is left for a dataplane (Felix's own ignore it too)"
)
_ORIGINAL = NotNeeded(
    "Felix's record of the selector it resolved into the rule's IP sets (for logs and"
    " Dikastes); the IP sets are what is matched"
)
_SERVICE_ACCOUNT = NotNeeded("Felix resolves it into the rule's IP sets")
_ALP = NotForPlatform(
    "application-layer (HTTP) policy, enforced by Envoy and Dikastes beside the pod;"
    " Felix's Linux dataplane renders the rule's other matches only, and so does the driver"
)
_BGP = NotForPlatform("BGP, which belongs to BIRD beside Felix")
_WIREGUARD = NotForPlatform("WireGuard (WireguardEnabled, refused), which is not implemented")
_BPF = NotForPlatform("the eBPF dataplane's (BPFEnabled, refused)")
# Felix's Windows dataplane reads no qos_controls; HNS can cap an
# endpoint's egress and no more, and the driver says so once for the rest.
_LINUX_ONLY = "; Linux only (Windows: one warning: HNS has no form for it)"
_BANDWIDTH = Honoured(
    _K + "test_qos_bandwidth.py::"
    "test_a_bandwidth_limit_holds_a_bulk_transfer_to_it_and_goes_with_it",
    "a TBF on the interface (ingress), an IFB device with a TBF fed by a u32 redirect"
    " (egress), as in Felix; on Windows the egress rate is the endpoint's HNS QOS policy"
    " (tests/windows/test_platform.py::test_an_egress_bandwidth_limit_is_the_endpoints_qos_policy),"
    " burst, peak rate and ingress have no HNS form (one warning)",
)
_PACKET_RATE = Honoured(
    _K + "test_qos_rules.py::test_a_packet_rate_limit_drops_the_excess_of_a_burst",
    "every packet counts, established or not, as in Felix" + _LINUX_ONLY,
)
_CONNECTIONS = Honoured(
    _K + "test_qos_rules.py::test_a_connection_limit_refuses_the_next_connection",
    "new TCP connections beyond it get a reset, as in Felix" + _LINUX_ONLY,
)
_DSCP = Honoured(
    _K + "test_dscp.py::test_egress_leaving_the_cluster_carries_the_endpoints_dscp",
    "egress leaving the cluster (to no IP pool, not to this host) marked in mangle"
    " POSTROUTING, as Felix; a destination, which Felix leaves empty, narrows it;"
    " Linux only (Windows: one warning: HNS has no form for it)",
)
_LABELS = NotNeeded("labels for people: nothing is matched or written from them")
_LIVE_MIGRATION = Refused(
    "KubeVirt live migration (the elevated route during a move) is not implemented", ""
)
_LOOP = Refused("service CIDRs feed Felix's ServiceLoopPrevention, which is not implemented", "")


def _all(disposition: Disposition, *names: str) -> dict[str, Disposition]:
    return dict.fromkeys(names, disposition)


FIELDS: Mapping[str, Mapping[str, Disposition]] = {
    "ToDataplane": {
        "sequence_number": _SEQUENCE,
        "in_sync": _IN_SYNC,
        "config_update": _CONFIG,
        **_all(_DIFF, "ipset_update", "ipset_delta_update", "ipset_remove"),
        **_all(_DIFF, "active_profile_update", "active_profile_remove"),
        **_all(_DIFF, "active_policy_update", "active_policy_remove"),
        **_all(_HOST, "host_endpoint_update", "host_endpoint_remove"),
        **_all(_MATRIX, "workload_endpoint_update", "workload_endpoint_remove"),
        **_all(_OVERLAY, "host_metadata_update", "host_metadata_remove"),
        **_all(
            _RELEASES,
            "host_metadata_v4v6_update",
            "host_metadata_v4v6_remove",
            "host_metadata_v6_update",
            "host_metadata_v6_remove",
        ),
        **_all(_NAT_OUT, "ipam_pool_update", "ipam_pool_remove"),
        **_all(_RESOLVED, "service_account_update", "service_account_remove"),
        **_all(_RESOLVED, "namespace_update", "namespace_remove"),
        **_all(_OVERLAY, "route_update", "vtep_update"),
        **_all(_NODE_GONE, "route_remove", "vtep_remove"),
        **_all(
            _WIREGUARD,
            "wireguard_endpoint_update",
            "wireguard_endpoint_remove",
            "wireguard_endpoint_v6_update",
            "wireguard_endpoint_v6_remove",
        ),
        "global_bgp_config_update": NotNeeded(
            "judged by what it carries: see GlobalBGPConfigUpdate's fields"
        ),
        "encapsulation": _OVERLAY,
        "service_update": Honoured(
            _K + "test_linux_services.py::"
            "test_a_service_felix_sends_without_backends_is_not_programmed",
            "programmed once its backends arrive (ServiceBackendsUpdate, the driver's own);"
            " Felix sends none, so under Felix no service is, as with its own dataplane"
            " (under the real Felix: tests/felix/test_default_services.py)",
        ),
        "service_remove": _SERVICES,
    },
    "ConfigUpdate": {
        "config": _CONFIG,
        "source_to_raw_config": NotNeeded("which source set each key: Felix's own logging"),
        "message": NotNeeded("a note for Felix's own log"),
    },
    "RawConfig": _all(
        NotNeeded("which source set each key: Felix's own logging"), "source", "config"
    ),
    "IPSetUpdate": _all(_DIFF, "id", "members", "type"),
    "IPSetDeltaUpdate": _all(_CHANGES, "id", "added_members", "removed_members"),
    "IPSetRemove": _all(_DIFF, "id"),
    "ActiveProfileUpdate": _all(_DIFF, "id", "profile"),
    "ActiveProfileRemove": _all(_DIFF, "id"),
    "ProfileID": _all(_DIFF, "name"),
    "Profile": _all(_DIFF, "inbound_rules", "outbound_rules"),
    "ActivePolicyUpdate": _all(_DIFF, "id", "policy"),
    "ActivePolicyRemove": _all(_DIFF, "id"),
    "PolicyID": {**_all(_DIFF, "name", "namespace", "kind"), "tier": _RELEASES},
    "Policy": {
        **_all(_DIFF, "namespace", "inbound_rules", "outbound_rules", "tier"),
        "untracked": _UNTRACKED,
        "pre_dnat": _PRE_DNAT,
        "original_selector": _ORIGINAL,
        "perf_hints": NotNeeded(
            "a hint to Felix's policy manager to program a policy before an endpoint needs"
            " it; the driver programs each policy once an endpoint uses it"
        ),
    },
    "Rule": {
        **_all(
            _DIFF,
            "action",
            "ip_version",
            "protocol",
            "src_net",
            "src_ports",
            "src_named_port_ip_set_ids",
            "dst_net",
            "dst_ports",
            "dst_named_port_ip_set_ids",
            "icmp_type",
            "icmp_type_code",
            "src_ip_set_ids",
            "dst_ip_set_ids",
            "dst_ip_port_set_ids",
            "not_protocol",
            "not_src_net",
            "not_src_ports",
            "not_dst_net",
            "not_dst_ports",
            "not_icmp_type",
            "not_icmp_type_code",
            "not_src_ip_set_ids",
            "not_dst_ip_set_ids",
            "not_src_named_port_ip_set_ids",
            "not_dst_named_port_ip_set_ids",
            "rule_id",
        ),
        **_all(
            _ORIGINAL,
            "original_src_selector",
            "original_dst_selector",
            "original_src_namespace_selector",
            "original_dst_namespace_selector",
            "original_not_src_selector",
            "original_not_dst_selector",
            "original_src_service",
            "original_src_service_namespace",
            "original_dst_service",
            "original_dst_service_namespace",
        ),
        **_all(_SERVICE_ACCOUNT, "src_service_account_match", "dst_service_account_match"),
        "http_match": _ALP,
        "metadata": _LABELS,
    },
    "Protocol": _all(_DIFF, "number", "name"),
    "PortRange": _all(_DIFF, "first", "last"),
    "IcmpTypeAndCode": _all(_DIFF, "type", "code"),
    "ServiceAccountMatch": _all(_SERVICE_ACCOUNT, "selector", "names"),
    "HTTPMatch": _all(_ALP, "methods", "paths"),
    "PathMatch": _all(_ALP, "exact", "prefix"),
    "RuleMetadata": _all(_LABELS, "annotations"),
    "TierInfo": _all(_DIFF, "name", "ingress_policies", "egress_policies", "default_action"),
    "NatInfo": _all(_FLOATING, "ext_ip", "int_ip"),
    "WorkloadEndpointUpdate": _all(_MATRIX, "id", "endpoint"),
    "WorkloadEndpointRemove": _all(_MATRIX, "id"),
    "WorkloadEndpointID": _all(_MATRIX, "orchestrator_id", "workload_id", "endpoint_id"),
    "WorkloadEndpoint": {
        "state": _INACTIVE,
        **_all(_MATRIX, "name", "mac", "profile_ids", "ipv4_nets", "ipv6_nets", "tiers"),
        **_all(_FLOATING, "ipv4_nat", "ipv6_nat"),
        "allow_spoofed_source_prefixes": _SPOOF,
        "annotations": _LABELS,
        "qos_controls": Honoured(
            _K + "test_qos_rules.py::test_a_packet_rate_limit_drops_the_excess_of_a_burst",
            "field by field (QoSControls)",
        ),
        "qos_policies": _DSCP,
        "local_bgp_peer": _BGP,
        "skip_redir": _BPF,
        "is_istio_ambient": Refused("Istio ambient mode is not implemented", ""),
        **_all(
            _LIVE_MIGRATION, "live_migration_role", "live_migration_uid", "live_migration_vmi_name"
        ),
        "type": NotNeeded("marks a KubeVirt VM's endpoint (v3.30); it is programmed as any other"),
    },
    "QoSControls": {
        **_all(
            _BANDWIDTH,
            "IngressBandwidth",
            "EgressBandwidth",
            "IngressBurst",
            "EgressBurst",
            "IngressPeakrate",
            "EgressPeakrate",
            "IngressMinburst",
            "EgressMinburst",
        ),
        **_all(
            _PACKET_RATE,
            "IngressPacketRate",
            "EgressPacketRate",
            "IngressPacketBurst",
            "EgressPacketBurst",
        ),
        **_all(_CONNECTIONS, "IngressMaxConnections", "EgressMaxConnections"),
    },
    "QoSPolicy": _all(_DSCP, "destination", "dscp"),
    "LocalBGPPeer": _all(_BGP, "bgp_peer_name"),
    "WorkloadBpfSkipRedir": _all(_BPF, "Egress", "Ingress"),
    "HostEndpointUpdate": _all(_HOST, "id", "endpoint"),
    "HostEndpointRemove": _all(_HOST, "id"),
    "HostEndpointID": _all(_HOST, "endpoint_id"),
    "HostEndpoint": {
        **_all(_HOST, "name", "profile_ids", "tiers", "expected_ipv4_addrs", "expected_ipv6_addrs"),
        "untracked_tiers": _UNTRACKED,
        "pre_dnat_tiers": _PRE_DNAT,
        "forward_tiers": _FORWARD,
        "qos_policies": _DSCP,
    },
    "HostMetadataUpdate": {
        **_all(_OVERLAY, "hostname", "ipv4_addr", "ipv6_addr"),
        "asnumber": _BGP,
        "labels": _LABELS,
    },
    "HostMetadataRemove": _all(_NODE_GONE, "hostname", "ipv4_addr"),
    "HostMetadataV4V6Update": {
        **_all(_RELEASES, "hostname", "ipv4_addr", "ipv6_addr"),
        "asnumber": _BGP,
        "labels": _LABELS,
    },
    "HostMetadataV4V6Remove": _all(_RELEASES, "hostname", "ipv4_addr"),
    "HostMetadataV6Update": _all(_RELEASES, "hostname", "ipv6_addr"),
    "HostMetadataV6Remove": _all(_RELEASES, "hostname", "ipv6_addr"),
    "IPAMPoolUpdate": _all(_NAT_OUT, "id", "pool"),
    "IPAMPoolRemove": _all(_NAT_OUT, "id"),
    "IPAMPool": {
        **_all(_NAT_OUT, "cidr", "masquerade"),
        **_all(
            NotNeeded("each route's own ip_pool_type and tunnel_type say how a block is reached"),
            "ipip_mode",
            "vxlan_mode",
        ),
        "allowed_uses": Refused(
            "a pool for LoadBalancer addresses only is treated as a workload pool by NAT outgoing",
            "Workload,Tunnel",
            harmless=lambda uses: not uses or "Workload" in uses.split(","),
        ),
    },
    "Encapsulation": _all(
        _OVERLAY, "ipip_enabled", "vxlan_enabled", "vxlan_enabled_v6", "no_encap_enabled"
    ),
    "ServiceAccountUpdate": _all(_RESOLVED, "id", "labels"),
    "ServiceAccountRemove": _all(_RESOLVED, "id"),
    "ServiceAccountID": _all(_RESOLVED, "namespace", "name"),
    "NamespaceUpdate": _all(_RESOLVED, "id", "labels"),
    "NamespaceRemove": _all(_RESOLVED, "id"),
    "NamespaceID": _all(_RESOLVED, "name"),
    "RouteUpdate": {
        **_all(
            _OVERLAY,
            "types",
            "ip_pool_type",
            "dst",
            "dst_node_name",
            "dst_node_ip",
            "nat_outgoing",
            "local_workload",
            "tunnel_type",
            "borrowed",
        ),
        "same_subnet": _SAME_SUBNET,
    },
    "RouteRemove": _all(_NODE_GONE, "dst"),
    "TunnelType": {**_all(_OVERLAY, "ipip", "vxlan"), "wireguard": _WIREGUARD},
    "VXLANTunnelEndpointUpdate": _all(
        _OVERLAY,
        "node",
        "mac",
        "ipv4_addr",
        "parent_device_ip",
        "mac_v6",
        "ipv6_addr",
        "parent_device_ipv6",
    ),
    "VXLANTunnelEndpointRemove": _all(_NODE_GONE, "node"),
    "WireguardEndpointUpdate": _all(_WIREGUARD, "hostname", "public_key", "interface_ipv4_addr"),
    "WireguardEndpointRemove": _all(_WIREGUARD, "hostname"),
    "WireguardEndpointV6Update": _all(
        _WIREGUARD, "hostname", "public_key_v6", "interface_ipv6_addr"
    ),
    "WireguardEndpointV6Remove": _all(_WIREGUARD, "hostname"),
    "GlobalBGPConfigUpdate": {
        **_all(
            _LOOP, "service_cluster_cidrs", "service_external_cidrs", "service_loadbalancer_cidrs"
        ),
        **_all(_BGP, "local_workload_peering_ip_v4", "local_workload_peering_ip_v6"),
    },
    "ServiceUpdate": {
        **_all(_SERVICES, "name", "namespace", "type", "cluster_ips", "ports"),
        "loadbalancer_ip": Honoured(
            _K + "test_linux_services.py::test_source_ranges_no_backends_and_terminating"
        ),
        "external_ips": Honoured("tests/linux/test_service_render.py::test_service_chains_golden"),
        "loadbalancer_ingress_ips": Honoured(
            "tests/test_services.py::test_extension_fields",
            "load balancer addresses, rendered as loadbalancer_ip's",
        ),
    },
    "ServicePort": {**_all(_SERVICES, "Protocol", "Port"), "NodePort": _NODE_PORT},
    "ServiceRemove": _all(_SERVICES, "name", "namespace"),
}
