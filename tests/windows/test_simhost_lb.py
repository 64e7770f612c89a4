"""The simulated host keeps HNS's rules for service load balancers and remote endpoints.

Every refused call raises the HRESULT HNS returns and leaves the host as it
was (the call is still counted: it was a round trip to the service).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dataplane.windows.hcn import (
    E_FAIL,
    E_INVALIDARG,
    ERROR_ALREADY_EXISTS,
    HCN_E_INVALID_POLICY,
    HcnError,
    HnsVersion,
    Json,
)
from dataplane.windows.simhost import NEWEST, SimHost

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
