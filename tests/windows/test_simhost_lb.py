"""The simulated host keeps HNS's rules for service load balancers and remote endpoints.

Every refused call raises the HRESULT HNS returns and leaves the host as it
was (the call is still counted: it was a round trip to the service).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.windows.hns.hcn import (
    E_FAIL,
    E_INVALIDARG,
    E_NOTIMPL,
    ERROR_ALREADY_EXISTS,
    HCN_E_ENDPOINT_NOT_FOUND,
    HCN_E_INVALID_POLICY,
    HcnError,
    HnsVersion,
    Json,
)
from dataplane.windows.sim.simhost import NEWEST, SimHost

POD_A, POD_B = "10.244.1.5", "10.244.1.6"


def node(version: HnsVersion = NEWEST, network_type: str = "L2Bridge") -> tuple[SimHost, str]:
    """A host with one network and two local pod endpoints; returns it and the network id."""
    sim = SimHost(version)
    net = sim.add_network({"Name": "Calico", "Type": network_type})["ID"]
    for name, ipv4, ipv6 in (("pod-a", POD_A, "fd00::a"), ("pod-b", POD_B, "fd00::b")):
        configs = [{"IpAddress": ipv4}, {"IpAddress": ipv6}]
        sim.add_local_endpoint(net, {"Name": name, "IpConfigurations": configs})
    return sim, net


def endpoint_ids(sim: SimHost) -> list[str]:
    return sorted(sim.endpoints)


def mapping(**overrides: object) -> Json:
    return {"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80, **overrides}


def balancer(sim: SimHost, **overrides: object) -> Json:
    lb: Json = {
        "HostComputeEndpoints": endpoint_ids(sim),
        "SourceVIP": "10.0.0.2",
        "FrontendVIPs": ["10.96.0.10"],
        "PortMappings": [mapping()],
        "SchemaVersion": {"Major": 2, "Minor": 0},
    }
    return {**lb, **overrides}


def remote(address: str = "10.244.2.7", **overrides: object) -> Json:
    """A remote endpoint as kube-proxy's winkernel creates it for a pod on another node."""
    mac = "02-11-" + "-".join(f"{int(octet):02x}" for octet in address.split("."))
    return {
        "Name": f"remote-{address}",
        "Flags": 1,
        "IpConfigurations": [{"IpAddress": address}],
        "MacAddress": mac,
        "Policies": [{"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.12"}}],
        "SchemaVersion": {"Major": 2, "Minor": 0},
        **overrides,
    }


def state(sim: SimHost) -> Json:
    """The host's objects (not its call counts, which a refused call still moves)."""
    return {k: v for k, v in sim.snapshot().items() if k != "Calls"}


def refused(sim: SimHost, hresult: int, call: Callable[..., Any], *args: object) -> HcnError:
    """Make ``call(*args)`` on ``sim``; it must fail with ``hresult`` and change nothing."""
    before = state(sim)
    with pytest.raises(HcnError) as caught:
        call(*args)
    assert caught.value.hresult == hresult, caught.value
    assert state(sim) == before
    return caught.value


# --- endpoints ----------------------------------------------------------------


def test_remote_endpoints_as_kube_proxy_makes_them_are_taken_with_their_id() -> None:
    sim, overlay = node(network_type="Overlay")
    wanted = {**remote(), "ID": "a1b2c3d4-0000-4000-8000-000000000007"}
    made = sim.create_endpoint(overlay, wanted)
    assert made["ID"] == "A1B2C3D4-0000-4000-8000-000000000007"
    assert made == {**wanted, "ID": made["ID"], "HostComputeNetwork": overlay}
    sim.create_load_balancer(balancer(sim))  # a backend on another node
    assert made["ID"] in sim.load_balancers[next(iter(sim.load_balancers))]["HostComputeEndpoints"]


@pytest.mark.parametrize(
    ("bad", "hresult"),
    [
        ({"IpConfigurations": []}, E_INVALIDARG),
        (
            {"IpConfigurations": [{"IpAddress": "10.244.2.7"}, {"IpAddress": "fd00:2::7"}]},
            E_INVALIDARG,
        ),
        ({"IpConfigurations": [{"IpAddress": "10.244.2.300"}]}, E_INVALIDARG),
        ({"IpConfigurations": [{"PrefixLength": 24}]}, E_INVALIDARG),
        ({"MacAddress": None}, E_INVALIDARG),
        ({"MacAddress": "02:11:0a:f4:02:07"}, E_INVALIDARG),
        ({"MacAddress": "02-11-0a-f4-02"}, E_INVALIDARG),
        ({"Policies": []}, HCN_E_INVALID_POLICY),  # no provider address on an overlay
        (
            {"Policies": [{"Type": "ProviderAddress", "Settings": {"ProviderAddress": "node-2"}}]},
            HCN_E_INVALID_POLICY,
        ),
        ({"Policies": [{"Type": "ProviderAddress", "Settings": {}}]}, HCN_E_INVALID_POLICY),
    ],
)
def test_a_malformed_remote_endpoint_is_refused(bad: Json, hresult: int) -> None:
    sim, overlay = node(network_type="overlay")
    refused(sim, hresult, sim.create_endpoint, overlay, remote(**bad))


def test_a_provider_address_is_needed_only_on_an_overlay_network() -> None:
    sim, bridge = node(network_type="L2Bridge")
    sim.create_endpoint(bridge, remote(Policies=[]))
    local = {
        "Name": "pod-c",
        "IpConfigurations": [{"IpAddress": "10.244.1.7"}, {"IpAddress": "fd00::c"}],
    }
    sim.create_endpoint(bridge, local)  # a local endpoint has neither rule
    assert len(sim.endpoints) == 4


def test_an_address_is_held_by_one_endpoint_of_a_network() -> None:
    sim, net = node()
    error = refused(sim, ERROR_ALREADY_EXISTS, sim.create_endpoint, net, remote(POD_A))
    assert POD_A in error.record
    twin = {"Name": "twin", "IpConfigurations": [{"IpAddress": "FD00:0::A"}]}
    refused(sim, ERROR_ALREADY_EXISTS, sim.create_endpoint, net, twin)
    refused(sim, ERROR_ALREADY_EXISTS, sim.add_local_endpoint, net, twin)
    other = sim.add_network({"Name": "nat", "Type": "NAT"})["ID"]
    sim.create_endpoint(other, remote(POD_A))  # another network's address space
    (pod_a,) = [e for e in sim.endpoints.values() if e.get("Name") == "pod-a"]
    sim.delete_endpoint(pod_a["ID"])
    sim.create_endpoint(net, remote(POD_A))  # freed with its endpoint


def test_an_endpoint_a_load_balancer_lists_is_not_deleted() -> None:
    sim, _ = node()
    kept, used = endpoint_ids(sim)
    lb = sim.create_load_balancer(balancer(sim, HostComputeEndpoints=[used.lower()]))
    error = refused(sim, E_FAIL, sim.delete_endpoint, used)
    assert lb["ID"] in error.record
    sim.modify_load_balancer(lb["ID"], balancer(sim, HostComputeEndpoints=[kept]))
    sim.delete_endpoint(used)
    refused(sim, E_FAIL, sim.delete_endpoint, kept)
    sim.delete_load_balancer(lb["ID"])
    sim.delete_endpoint(kept)
    assert sim.endpoints == {}


# --- load balancers ---------------------------------------------------------


def test_a_load_balancer_as_the_service_driver_writes_it_is_taken_whole() -> None:
    sim, _ = node()
    lb = balancer(sim, PortMappings=[mapping(DistributionType=2, Flags=1)], Flags=1)
    made = sim.create_load_balancer(lb)
    assert made == {**lb, "ID": made["ID"]}
    assert sim.list_load_balancers() == [made]


def test_a_load_balancer_names_existing_endpoints_only() -> None:
    sim, _ = node()
    gone = "6B4F0F1C-0000-4000-8000-000000000001"
    error = refused(
        sim,
        HCN_E_ENDPOINT_NOT_FOUND,
        sim.create_load_balancer,
        balancer(sim, HostComputeEndpoints=[endpoint_ids(sim)[0], gone]),
    )
    assert gone in error.record
    # Ids compare case-insensitively, as HNS's GUIDs do.
    sim.create_load_balancer(
        balancer(sim, HostComputeEndpoints=[e.lower() for e in endpoint_ids(sim)])
    )


@pytest.mark.parametrize(
    "lb",
    [
        {"PortMappings": []},
        {"PortMappings": None},
        {"HostComputeEndpoints": []},
    ],
)
def test_a_load_balancer_needs_a_mapping_and_an_endpoint(lb: Json) -> None:
    sim, _ = node()
    refused(sim, HCN_E_INVALID_POLICY, sim.create_load_balancer, balancer(sim, **lb))


@pytest.mark.parametrize(
    "bad",
    [
        {"Protocol": 1},  # ICMP: HNS balances TCP, UDP and SCTP only
        {"Protocol": "6"},
        {"Protocol": None},  # omitempty: absent is 0
        {"ExternalPort": 0},
        {"ExternalPort": 65536},
        {"InternalPort": 0},
        {"InternalPort": -1},
        {"InternalPort": True},
        {"DistributionType": 3},
        {"Flags": "1"},
    ],
)
def test_port_mappings_need_a_known_protocol_and_real_ports(bad: Json) -> None:
    sim, _ = node()
    lb = balancer(sim, PortMappings=[mapping(**bad)])
    refused(sim, HCN_E_INVALID_POLICY, sim.create_load_balancer, lb)
    without = {k: v for k, v in mapping().items() if k not in bad}
    if len(without) < len(mapping()):  # the field absent altogether is 0, refused alike
        refused(
            sim,
            HCN_E_INVALID_POLICY,
            sim.create_load_balancer,
            balancer(sim, PortMappings=[without]),
        )


def test_tcp_udp_and_sctp_are_balanced_at_the_ends_of_the_port_range() -> None:
    sim, _ = node()
    for number, port in ((6, 1), (17, 65535), (132, 5000)):
        sim.create_load_balancer(
            balancer(sim, PortMappings=[mapping(Protocol=number, ExternalPort=port)])
        )
    assert len(sim.load_balancers) == 3


@pytest.mark.parametrize(
    ("feature", "lb_fields", "too_old", "new_enough"),
    [
        (
            "SessionAffinity",
            {"PortMappings": [mapping(DistributionType=2)]},
            [HnsVersion(11, 10)],
            [HnsVersion(12, 0)],
        ),
        (
            "SessionAffinity",
            {"PortMappings": [mapping(DistributionType=1)]},
            [HnsVersion(11, 10)],
            [HnsVersion(12, 0)],
        ),
        (
            "DSR",
            {"Flags": 1},
            [HnsVersion(9, 2), HnsVersion(10, 1)],
            [HnsVersion(9, 3), HnsVersion(10, 2)],
        ),
        (
            "IPv6DualStack",
            {"Flags": 2, "FrontendVIPs": ["fd00:96::10"]},
            [HnsVersion(11, 9)],
            [HnsVersion(11, 10)],
        ),
    ],
)
def test_features_a_host_lacks_are_not_implemented(
    feature: str, lb_fields: Json, too_old: list[HnsVersion], new_enough: list[HnsVersion]
) -> None:
    for version in too_old:
        sim, _ = node(version)
        assert not version.supports(feature)
        refused(sim, E_NOTIMPL, sim.create_load_balancer, balancer(sim, **lb_fields))
    for version in new_enough:
        sim, _ = node(version)
        sim.create_load_balancer(balancer(sim, **lb_fields))


@pytest.mark.parametrize(
    "bad",
    [
        {"FrontendVIPs": ["10.96.0.300"]},
        {"FrontendVIPs": ["10.96.0.0/24"]},
        {"FrontendVIPs": ["fd00:96::10"]},  # IPv6 without the IPv6 flag
        {"FrontendVIPs": ["10.96.0.10"], "Flags": 2},  # the flag with an IPv4 VIP
        {"FrontendVIPs": ["fd00:96::10", "10.96.0.10"], "Flags": 2},
        {"SourceVIP": "node-1"},
        {"Flags": "0"},
    ],
)
def test_vips_are_addresses_of_the_family_the_ipv6_flag_says(bad: Json) -> None:
    sim, _ = node()
    refused(sim, HCN_E_INVALID_POLICY, sim.create_load_balancer, balancer(sim, **bad))


def test_a_node_port_and_an_ipv6_load_balancer_are_taken() -> None:
    sim, _ = node()
    sim.create_load_balancer(
        balancer(sim, FrontendVIPs=[], PortMappings=[mapping(ExternalPort=30080)])
    )
    sim.create_load_balancer(
        balancer(sim, FrontendVIPs=["fd00:96::10"], Flags=2, SourceVIP="fd00::2")
    )
    no_source = balancer(sim, FrontendVIPs=["10.96.0.11"])
    del no_source["SourceVIP"]
    sim.create_load_balancer(no_source)
    assert len(sim.load_balancers) == 3


def test_frontends_are_compared_as_addresses_and_node_ports_by_family() -> None:
    sim, _ = node()
    sim.create_load_balancer(balancer(sim, FrontendVIPs=["fd00:96::a"], Flags=2))
    refused(
        sim,
        ERROR_ALREADY_EXISTS,
        sim.create_load_balancer,
        balancer(sim, FrontendVIPs=["FD00:96:0::A"], Flags=2),
    )
    node_port = [mapping(ExternalPort=30080, Flags=2)]  # LocalRoutedVIP, as kube-proxy's
    sim.create_load_balancer(balancer(sim, FrontendVIPs=[], PortMappings=node_port))
    sim.create_load_balancer(balancer(sim, FrontendVIPs=[], PortMappings=node_port, Flags=2))
    refused(
        sim,
        ERROR_ALREADY_EXISTS,
        sim.create_load_balancer,
        balancer(sim, FrontendVIPs=[], PortMappings=node_port),
    )
    # On a node port, LocalRoutedVIP makes a second frontend; on a VIP it does not.
    sim.create_load_balancer(
        balancer(sim, FrontendVIPs=[], PortMappings=[mapping(ExternalPort=30080)])
    )
    sim.create_load_balancer(balancer(sim))
    refused(
        sim,
        ERROR_ALREADY_EXISTS,
        sim.create_load_balancer,
        balancer(sim, PortMappings=[mapping(Flags=2)]),
    )


def test_modify_replaces_in_place_under_the_same_rules() -> None:
    sim, _ = node()
    first = sim.create_load_balancer(balancer(sim))
    second = sim.create_load_balancer(balancer(sim, FrontendVIPs=["10.96.0.11"]))
    one = endpoint_ids(sim)[:1]
    changed = sim.modify_load_balancer(first["ID"], balancer(sim, HostComputeEndpoints=one))
    assert changed["ID"] == first["ID"] and sim.load_balancers[first["ID"]] == changed
    assert list(sim.load_balancers) == [first["ID"], second["ID"]]
    taken = balancer(sim, FrontendVIPs=["10.96.0.11"])
    refused(sim, ERROR_ALREADY_EXISTS, sim.modify_load_balancer, first["ID"], taken)
    bad = balancer(sim, PortMappings=[mapping(Protocol=1)])
    refused(sim, HCN_E_INVALID_POLICY, sim.modify_load_balancer, first["ID"], bad)
    gone = balancer(sim, HostComputeEndpoints=["6B4F0F1C-0000-4000-8000-000000000001"])
    refused(sim, HCN_E_ENDPOINT_NOT_FOUND, sim.modify_load_balancer, first["ID"], gone)


def test_modify_needs_15_4_and_older_hosts_delete_and_create() -> None:
    sim, _ = node(HnsVersion(15, 3))
    made = sim.create_load_balancer(balancer(sim))
    wanted = balancer(sim, HostComputeEndpoints=endpoint_ids(sim)[:1])
    refused(sim, E_NOTIMPL, sim.modify_load_balancer, made["ID"], wanted)
    sim.delete_load_balancer(made["ID"])
    sim.create_load_balancer(wanted)
    assert [lb["HostComputeEndpoints"] for lb in sim.load_balancers.values()] == [
        endpoint_ids(sim)[:1]
    ]


# --- a property -----------------------------------------------------------------

_VIPS = ["10.96.0.10", "10.96.0.11", "fd00:96::10", None]  # None: a node port
_requests = st.lists(
    st.tuples(
        st.sampled_from(_VIPS),
        st.sampled_from([6, 17]),
        st.sampled_from([80, 81]),
        st.booleans(),  # LocalRoutedVIP
        st.booleans(),  # IPv6, for a node port
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(_requests)
def test_accepted_load_balancers_never_share_a_frontend(requests: list[tuple[Any, ...]]) -> None:
    """Whatever the order, the host holds no two LBs on one VIP or node port frontend."""
    sim, _ = node()
    for vip, protocol, port, local, ipv6 in requests:
        v6 = ":" in vip if vip else ipv6
        lb = balancer(
            sim,
            FrontendVIPs=[vip] if vip else [],
            Flags=2 if v6 else 0,
            PortMappings=[mapping(Protocol=protocol, ExternalPort=port, Flags=2 if local else 0)],
        )
        try:
            sim.create_load_balancer(lb)
        except HcnError as exc:
            assert exc.hresult == ERROR_ALREADY_EXISTS
    seen: set[tuple[object, ...]] = set()
    for lb in sim.load_balancers.values():
        (m,) = lb["PortMappings"]
        if lb["FrontendVIPs"]:
            key: tuple[object, ...] = (lb["FrontendVIPs"][0], m["Protocol"], m["ExternalPort"])
        else:
            key = ("node port", lb["Flags"], m["Protocol"], m["ExternalPort"], m["Flags"])
        assert key not in seen
        seen.add(key)
