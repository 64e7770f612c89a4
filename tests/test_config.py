from __future__ import annotations

import pytest

from dataplane.config import Config, ProtoPort, parse_config
from dataplane.errors import ConfigError


def test_defaults_are_felix_defaults() -> None:
    config = parse_config({})
    assert config == Config()
    assert config.interface_prefixes == ("cali",)
    assert config.reporting_interval == 30.0
    assert config.iptables_mark_mask == 0xFFFF0000
    assert ProtoPort("tcp", 22) in config.failsafe_inbound_host_ports
    assert ProtoPort("udp", 53) in config.failsafe_outbound_host_ports


def test_known_keys_are_parsed_and_unknown_ignored() -> None:
    config = parse_config(
        {
            "InterfacePrefix": "cali,tap",
            "ReportingIntervalSecs": "1m30s",
            "IptablesRefreshInterval": "2.5",
            "RouteRefreshInterval": "500ms",
            "Ipv6Support": "false",
            "ChainInsertMode": "Append",
            "DefaultEndpointToHostAction": "accept",
            "IptablesMarkMask": "0xfff00000",
            "FailsafeInboundHostPorts": "tcp:10.0.0.0/8:22, udp:53, 8080",
            "FailsafeOutboundHostPorts": "none",
            "NATPortRange": "32768:65535",
            "KubeNodePortRanges": "30000:32767,40000",
            "LogSeverityScreen": "warn",
            "DatastoreType": "kubernetes",
        }
    )
    assert config.interface_prefixes == ("cali", "tap")
    assert config.reporting_interval == 90.0
    assert config.iptables_refresh_interval == 2.5
    assert config.route_refresh_interval == 0.5
    assert config.ipv6_support is False
    assert config.chain_insert_mode == "append"
    assert config.default_endpoint_to_host_action == "ACCEPT"
    assert config.iptables_mark_mask == 0xFFF00000
    assert config.failsafe_inbound_host_ports == (
        ProtoPort("tcp", 22, "10.0.0.0/8"),
        ProtoPort("udp", 53),
        ProtoPort("tcp", 8080),
    )
    assert config.failsafe_outbound_host_ports == ()
    assert config.nat_port_range == (32768, 65535)
    assert config.kube_node_port_ranges == ((30000, 32767), (40000, 40000))
    assert config.log_severity == "WARNING"


def test_keys_match_case_insensitively() -> None:
    assert parse_config({"reportingintervalsecs": "5"}).reporting_interval == 5.0


def test_absent_keys_keep_the_base_value() -> None:
    base = parse_config({"ReportingIntervalSecs": "5"})
    assert parse_config({"Ipv6Support": "false"}, base).reporting_interval == 5.0


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("Ipv6Support", "maybe"),
        ("ReportingIntervalSecs", "soon"),
        ("ReportingIntervalSecs", "-1"),
        ("ChainInsertMode", "middle"),
        ("IptablesMarkMask", "0"),
        ("FailsafeInboundHostPorts", "icmp:22"),
        ("FailsafeInboundHostPorts", "tcp:70000"),
        ("NATPortRange", "2000:1000"),
        ("InterfacePrefix", ""),
        ("DeviceRouteProtocol", "300"),
        ("VXLANVNI", "16777216"),
        ("VXLANVNI", "-1"),
        ("VXLANVNI", "many"),
        ("WindowsServiceSourceVIP", "10.0.0.2,10.0.0.3"),
        ("WindowsServiceSourceVIP", "10.0.0.2;rm -rf"),
        ("WindowsServiceDSR", "maybe"),
        ("VXLANPort", "0"),
        ("VXLANPort", "65536"),
        ("VXLANMTU", "100"),
        ("VXLANMTUV6", "big"),
        ("VXLANEnabled", "perhaps"),
        ("ExternalNodesCIDRList", "10.0.0.0/8,not-a-net"),
        ("ExternalNodesCIDRList", "10.0.0.0/8 -j ACCEPT"),
        ("NATOutgoingExclusions", "Everything"),
        ("NFTablesMode", "Sometimes"),
    ],
)
def test_invalid_values_name_key_and_value(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({key: value, "Other": "x"})
    assert f"config[{key}]" in str(info.value)
    assert repr(value) in str(info.value)


def test_log_prefix_is_limited_to_a_safe_alphabet() -> None:
    assert parse_config({"LogPrefix": "calico-drop %k"}).log_prefix == "calico-drop %k"
    for bad in ('x" -j ACCEPT', "a\nb", "x" * 40):
        with pytest.raises(ConfigError):
            parse_config({"LogPrefix": bad})


def test_a_mark_mask_too_narrow_for_our_marks_is_refused_at_the_edge() -> None:
    with pytest.raises(ConfigError, match=r"IptablesMarkMask.*at least 10 bits"):
        parse_config({"IptablesMarkMask": "0xff000000"})
    assert parse_config({"IptablesMarkMask": "0x000ffc00"}).iptables_mark_mask == 0xFFC00


def test_vxlan_vni_is_felixs_default_and_24_bits() -> None:
    assert Config().vxlan_vni == 4096
    assert parse_config({"VXLANVNI": "4097"}).vxlan_vni == 4097
    assert parse_config({"vxlanvni": "0x1000"}).vxlan_vni == 4096
    assert parse_config({"VXLANVNI": "16777215"}).vxlan_vni == 16777215


def test_overlay_keys_and_their_defaults() -> None:
    default = Config()
    assert (default.vxlan_port, default.vxlan_mtu, default.vxlan_mtu_v6) == (4789, 0, 0)
    assert default.vxlan_enabled is None and default.external_nodes_cidrs == ()
    config = parse_config(
        {
            "VXLANPort": "8472",
            "VXLANMTU": "1400",
            "VXLANEnabled": "true",
            "ExternalNodesCIDRList": " 10.1.2.3/8, fd00::1/64 ",
            "NATOutgoingExclusions": "IPPoolsAndHostIPs",
        }
    )
    assert (config.vxlan_port, config.vxlan_mtu, config.vxlan_enabled) == (8472, 1400, True)
    # Canonical networks: they go into an IP set.
    assert config.external_nodes_cidrs == ("10.0.0.0/8", "fd00::/64")
    assert config.nat_outgoing_exclusions == "ippoolsandhostips"


def test_windows_service_keys() -> None:
    assert Config().windows_source_vips == ()
    assert Config().windows_dsr is False
    config = parse_config(
        {"WindowsServiceSourceVIP": " 10.0.0.2, fd00::0:2", "WindowsServiceDSR": "true"}
    )
    assert config.windows_source_vips == ("10.0.0.2", "fd00::2")
    assert config.windows_dsr is True


def test_nftables_mode_is_felixs_three_values() -> None:
    assert Config().nftables_mode == "disabled"
    for raw, mode in (("Enabled", "enabled"), ("Auto", "auto"), ("Disabled", "disabled")):
        assert parse_config({"NFTablesMode": raw}).nftables_mode == mode
