"""The simulated HNS host keeps HNS's rules: ids, whole-list ACL updates, version gates, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dataplane.windows.hns.hcn import (
    E_NOTIMPL,
    ERROR_ALREADY_EXISTS,
    HCN_E_ENDPOINT_NOT_FOUND,
    HCN_E_INVALID_POLICY,
    HCN_E_INVALID_POLICY_TYPE,
    HcnError,
    HnsVersion,
    Json,
)
from dataplane.windows.sim.simhost import NEWEST, SimHost


def acl(action: str, direction: str, priority: int, **extra: object) -> Json:
    settings = {"Action": action, "Direction": direction, "RuleType": "Switch"}
    return {"Type": "ACL", "Settings": {**settings, "Priority": priority, **extra}}


def update(*policies: Json, kind: str = "Update") -> Json:
    return {"ResourceType": "Policy", "RequestType": kind, "Settings": {"Policies": list(policies)}}


def host(version: HnsVersion = NEWEST, **kwargs: Any) -> tuple[SimHost, str, str]:
    sim = SimHost(version, **kwargs)
    net = sim.add_network({"Name": "Calico", "Type": "L2Bridge"})
    ep = sim.add_local_endpoint(
        net["ID"], {"Name": "pod-a", "IpConfigurations": [{"IpAddress": "10.0.0.5"}]}
    )
    return sim, net["ID"], ep["ID"]


def test_update_replaces_the_whole_acl_list_and_keeps_other_policies() -> None:
    sim, _, ep = host()
    provider = {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.2"}}
    sim.modify_endpoint(ep, update(provider, kind="Add"))
    sim.modify_endpoint(ep, update(acl("Allow", "In", 100), acl("Block", "In", 200)))
    sim.modify_endpoint(ep, update(acl("Allow", "Out", 300)))
    (got,) = [e for e in sim.list_endpoints() if e["ID"] == ep]
    assert got["Policies"] == [provider, acl("Allow", "Out", 300)]
    # As through computenetwork.dll: a modify is an open, the modify and a
    # close; a listing one enumerate and an open, a query and a close each.
    assert sim.calls == {
        "EnumerateEndpoints": 1,
        "OpenEndpoint": 4,
        "QueryEndpointProperties": 1,
        "ModifyEndpoint": 3,
        "CloseEndpoint": 4,
    }


def test_an_invalid_acl_is_refused_and_changes_nothing() -> None:
    sim, _, ep = host()
    sim.modify_endpoint(ep, update(acl("Allow", "In", 100)))
    for bad in (
        acl("Pass", "In", 1),
        acl("Allow", "Sideways", 1),
        acl("Allow", "In", 70000),
        acl("Allow", "In", 1, Protocols="tcp"),
        acl("Allow", "In", 1, LocalPorts="80-"),
        acl("Allow", "In", 1, RemoteAddresses="10.0.0.1,,10.0.0.2"),
        acl("Allow", "In", 1, RemoteAddresses="no-such-set"),
        acl("Allow", "In", 1, Bogus="1"),
    ):
        with pytest.raises(HcnError) as caught:
            sim.modify_endpoint(ep, update(bad))
        assert caught.value.hresult == HCN_E_INVALID_POLICY, bad
    with pytest.raises(HcnError) as caught:
        sim.modify_endpoint(ep, update({"Type": "NoSuchPolicy", "Settings": {}}))
    assert caught.value.hresult == HCN_E_INVALID_POLICY_TYPE
    # hcsshim's QosPolicySetting is one uint64.
    for settings in ({}, {"MaximumOutgoingBandwidthInBytes": -1}, {"Bogus": 1}):
        with pytest.raises(HcnError) as caught:
            sim.modify_endpoint(ep, update({"Type": "QOS", "Settings": settings}))
        assert caught.value.hresult == HCN_E_INVALID_POLICY, settings
    assert sim.endpoints[ep]["Policies"] == [acl("Allow", "In", 100)]


def test_missing_objects_fail_with_not_found() -> None:
    sim, _, _ = host()
    gone = "6B4F0F1C-0000-4000-8000-000000000001"
    with pytest.raises(HcnError) as caught:
        sim.modify_endpoint(gone, update())
    assert caught.value.hresult == HCN_E_ENDPOINT_NOT_FOUND and caught.value.not_found
    with pytest.raises(HcnError) as caught:
        sim.delete_endpoint(gone)
    assert caught.value.hresult == HCN_E_ENDPOINT_NOT_FOUND
    with pytest.raises(HcnError) as caught:
        sim.delete_load_balancer(gone)
    assert caught.value.not_found


def test_version_gates_sets_ipv6_and_modify_load_balancer() -> None:
    old, net, ep = host(HnsVersion(11, 0))
    ipset = {"Type": "SetPolicy", "Settings": {"Id": "s1", "Name": "s1", "PolicyType": "IPSET"}}
    with pytest.raises(HcnError) as caught:
        old.modify_network(net, update(ipset, kind="Add"))
    assert caught.value.hresult == HCN_E_INVALID_POLICY_TYPE
    old.modify_endpoint(ep, update(acl("Allow", "In", 1, RemoteAddresses="10.1.0.0/16")))
    with pytest.raises(HcnError):
        old.modify_endpoint(ep, update(acl("Allow", "In", 1, RemoteAddresses="fd00::/64")))
    lb = {
        "HostComputeEndpoints": [ep],
        "FrontendVIPs": ["10.96.0.1"],
        "PortMappings": [{"Protocol": 6, "InternalPort": 80, "ExternalPort": 80}],
    }
    made = old.create_load_balancer(lb)
    with pytest.raises(HcnError) as caught:
        old.modify_load_balancer(made["ID"], lb)
    assert caught.value.hresult == E_NOTIMPL


def test_sets_are_known_by_id_and_acls_may_name_them() -> None:
    sim, net, ep = host()
    values = {"Id": "s1", "Name": "web", "PolicyType": "IPSET", "Values": "10.0.0.1,10.0.0.2"}
    sim.modify_network(net, update({"Type": "SetPolicy", "Settings": values}, kind="Add"))
    with pytest.raises(HcnError) as caught:
        sim.modify_network(net, update({"Type": "SetPolicy", "Settings": values}, kind="Add"))
    assert caught.value.hresult == ERROR_ALREADY_EXISTS
    newer = {**values, "Values": "10.0.0.3"}
    sim.modify_network(net, update({"Type": "SetPolicy", "Settings": newer}))
    assert [p["Settings"]["Values"] for p in sim.networks[net]["Policies"]] == ["10.0.0.3"]
    sim.modify_endpoint(ep, update(acl("Allow", "In", 1, RemoteAddresses="s1")))


def test_load_balancers_may_not_share_a_frontend() -> None:
    sim, _, ep = host()
    lb = {
        "HostComputeEndpoints": [ep],
        "FrontendVIPs": ["10.96.0.1"],
        "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}],
    }
    sim.create_load_balancer(lb)
    with pytest.raises(HcnError) as caught:
        sim.create_load_balancer({**lb, "HostComputeEndpoints": [ep, ep]})
    assert caught.value.hresult == ERROR_ALREADY_EXISTS
    other_port = {**lb, "PortMappings": [{"Protocol": 6, "InternalPort": 1, "ExternalPort": 81}]}
    sim.create_load_balancer(other_port)
    with pytest.raises(HcnError):
        sim.create_load_balancer({**lb, "FrontendVIPs": ["10.96.0.9"], "HostComputeEndpoints": []})


def test_faults_fail_the_call_they_name_and_nothing_else() -> None:
    sim, _, ep = host(fault=lambda call, target: call == "ModifyEndpoint")
    with pytest.raises(HcnError):
        sim.modify_endpoint(ep, update(acl("Allow", "In", 1)))
    assert "Policies" not in sim.endpoints[ep]
    assert sim.list_endpoints()
    assert sim.calls["ModifyEndpoint"] == 1


def test_latency_is_paid_per_call_through_the_injected_sleep() -> None:
    slept: list[float] = []
    sim, _, ep = host(latency=0.02, sleep=slept.append)
    sim.list_endpoints()  # enumerate, open, query, close
    sim.modify_endpoint(ep, update(acl("Allow", "In", 1)))  # open, modify, close
    assert slept == [0.02] * 7


def test_the_file_round_trips_and_counts_calls_across_runs(tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    sim, net, ep = host(HnsVersion(13, 1), path=path)
    sim.modify_endpoint(ep, update(acl("Allow", "In", 5, RemotePorts="80,8000-8080")))
    sim.flush()
    saved = json.loads(path.read_text())
    assert saved["Version"] == {"Major": 13, "Minor": 1}
    assert saved["Calls"] == {"CloseEndpoint": 1, "ModifyEndpoint": 1, "OpenEndpoint": 1}
    assert [e["ID"] for e in saved["Endpoints"]] == [ep]
    assert saved["Endpoints"][0]["HostComputeNetwork"] == net
    again = SimHost.load(path)
    assert again.version() == HnsVersion(13, 1)
    assert again.endpoints == sim.endpoints and again.networks == sim.networks
    again.list_endpoints()
    again.flush()
    assert json.loads(path.read_text())["Calls"] == {
        "CloseEndpoint": 2,
        "EnumerateEndpoints": 1,
        "HNSCall": 1,
        "ModifyEndpoint": 1,
        "OpenEndpoint": 2,
        "QueryEndpointProperties": 1,
    }
    assert [p.name for p in tmp_path.iterdir()] == ["host.json"]


def test_a_bad_host_file_is_refused_with_its_name(tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    path.write_text(json.dumps({"Endpoints": [{"Name": "no id"}]}))
    with pytest.raises(ValueError, match=r"host\.json: an object in Endpoints has no ID"):
        SimHost.load(path)


def test_remote_subnet_routes_only_on_overlay_networks_with_valid_settings() -> None:
    route = {
        "DestinationPrefix": "10.65.1.0/26",
        "IsolationId": 4096,
        "ProviderAddress": "192.168.0.2",
        "DistributedRouterMacAddress": "00-15-5d-01-02-03",
    }

    def add(settings: Json) -> Json:
        return update({"Type": "RemoteSubnetRoute", "Settings": settings}, kind="Add")

    sim = SimHost()
    overlay = sim.add_network({"Name": "Calico", "Type": "Overlay"})["ID"]
    sim.modify_network(overlay, add(route))
    bad = [
        {**route, "IsolationId": 70000},
        {**route, "IsolationId": "4096"},
        {**route, "DestinationPrefix": "10.65.1.0/33"},
        {**route, "ProviderAddress": "node-2"},
        {**route, "DistributedRouterMacAddress": "00:15:5d:01:02:03"},
    ]
    for settings in bad:
        with pytest.raises(HcnError) as caught:
            sim.modify_network(overlay, add(settings))
        assert caught.value.hresult == HCN_E_INVALID_POLICY
    bridge = sim.add_network({"Name": "Calico2", "Type": "L2Bridge"})["ID"]
    with pytest.raises(HcnError, match="L2Bridge"):
        sim.modify_network(bridge, add(route))
    old = SimHost(HnsVersion(9, 1))
    network = old.add_network({"Name": "Calico", "Type": "Overlay"})["ID"]
    with pytest.raises(HcnError, match=r"before 9\.2"):
        old.modify_network(network, add(route))
    assert len(sim.networks[overlay.upper()]["Policies"]) == 1
