"""Where a connection to a service goes, read from a host's load balancers and endpoints."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.windows.hns.hcn import ERROR_ALREADY_EXISTS, HcnError, Json
from dataplane.windows.sim.lb_verdict import ServiceRoute, Target, backend_addresses, service_route
from dataplane.windows.sim.simhost import SimHost

NODE_V4, NODE_V6 = "10.0.0.2", "fd00:1::2"
NODE = (NODE_V4, NODE_V6)
PROVIDER = "192.168.1.12"  # the node that hosts the remote pod


def pods() -> tuple[SimHost, dict[str, str]]:
    """An overlay host: pods a and b here (dual stack), pod c on another node; ids by name."""
    sim = SimHost()
    net = sim.add_network({"Name": "Calico", "Type": "Overlay"})["ID"]
    ids = {}
    for name, ipv4, ipv6 in (("a", "10.244.1.5", "fd00::a"), ("b", "10.244.1.6", "fd00::b")):
        configs = [{"IpAddress": ipv4}, {"IpAddress": ipv6}]
        ids[name] = sim.add_local_endpoint(net, {"Name": name, "IpConfigurations": configs})["ID"]
    remote = {
        "Name": "c",
        "Flags": 1,
        "IpConfigurations": [{"IpAddress": "10.244.2.7"}],
        "MacAddress": "02-11-0a-f4-02-07",
        "Policies": [{"Type": "ProviderAddress", "Settings": {"ProviderAddress": PROVIDER}}],
    }
    ids["c"] = sim.create_endpoint(net, remote)["ID"]
    return sim, ids


def balance(
    sim: SimHost,
    members: list[str],
    vips: list[str],
    *,
    protocol: int = 6,
    port: int = 80,
    target: int = 8080,
    flags: int = 0,
    mapping_flags: int = 0,
    distribution: int = 0,
) -> str:
    mapping = {
        "Protocol": protocol,
        "InternalPort": target,
        "ExternalPort": port,
        "DistributionType": distribution,
        "Flags": mapping_flags,
    }
    lb = {
        "HostComputeEndpoints": members,
        "SourceVIP": "fd00:1::3" if flags & 2 else "10.0.0.3",
        "FrontendVIPs": vips,
        "PortMappings": [mapping],
        "Flags": flags,
    }
    return str(sim.create_load_balancer(lb)["ID"])


def test_a_cluster_ip_reaches_its_backends_on_the_target_port() -> None:
    sim, ids = pods()
    lb = balance(sim, [ids["a"], ids["c"]], ["10.96.0.10"])
    route = service_route(sim.snapshot(), "10.96.0.10", "tcp", 80)
    assert route == ServiceRoute(
        load_balancer=lb,
        backends=(
            Target("10.244.1.5", 8080, ids["a"], remote=False, provider_address=None),
            Target("10.244.2.7", 8080, ids["c"], remote=True, provider_address=PROVIDER),
        ),
        affinity=False,
        preserves_client=False,
        external=False,
    )
    assert backend_addresses(route) == {("10.244.1.5", 8080), ("10.244.2.7", 8080)}


def test_what_no_load_balancer_listens_on_is_not_balanced() -> None:
    sim, ids = pods()
    balance(sim, [ids["a"]], ["10.96.0.10"])
    host = sim.snapshot()
    assert service_route(host, "10.96.0.10", "udp", 80) is None
    assert service_route(host, "10.96.0.10", "tcp", 81) is None
    assert service_route(host, "10.96.0.11", "tcp", 80) is None
    assert service_route(host, "10.244.1.5", "tcp", 8080) is None  # a pod, not a service
    with pytest.raises(ValueError, match="icmp"):
        service_route(host, "10.96.0.10", "icmp", 80)


def test_a_node_port_listens_on_the_node_addresses_of_its_family() -> None:
    sim, ids = pods()
    lb = balance(sim, [ids["a"], ids["b"]], [], port=30080, mapping_flags=2)  # LocalRoutedVIP
    host = sim.snapshot()
    route = service_route(host, NODE_V4, "TCP", 30080, node_addresses=NODE)
    assert route is not None and route.load_balancer == lb
    assert backend_addresses(route) == {("10.244.1.5", 8080), ("10.244.1.6", 8080)}
    assert service_route(host, NODE_V4, "tcp", 30080) is None  # not given as the node's
    assert service_route(host, NODE_V6, "tcp", 30080, node_addresses=NODE) is None  # IPv4 LB
    assert service_route(host, "10.0.0.9", "tcp", 30080, node_addresses=NODE) is None


def test_a_vip_answers_before_a_node_port_and_a_node_port_before_its_local_routed_twin() -> None:
    sim, ids = pods()

    def answer() -> str | None:
        route = service_route(sim.snapshot(), NODE_V4, "tcp", 30080, node_addresses=NODE)
        return route.load_balancer if route else None

    local = balance(sim, [ids["a"]], [], port=30080, mapping_flags=2)
    assert answer() == local
    plain = balance(sim, [ids["b"]], [], port=30080)
    assert answer() == plain
    external = balance(sim, [ids["c"]], [NODE_V4], port=30080, mapping_flags=16)
    assert answer() == external


def test_ipv6_vips_reach_backends_by_their_ipv6_addresses() -> None:
    sim, ids = pods()
    lb = balance(sim, [ids["a"], ids["b"], ids["c"]], ["fd00:96::10"], flags=2)
    route = service_route(sim.snapshot(), "FD00:96:0::10", "tcp", 80)
    assert route is not None and route.load_balancer == lb
    # Pod c has no IPv6 address: nothing of the family to send to.
    assert backend_addresses(route) == {("fd00::a", 8080), ("fd00::b", 8080)}


def test_affinity_dsr_and_external_ip_are_read_from_the_flags() -> None:
    sim, ids = pods()
    balance(
        sim,
        [ids["a"]],
        ["203.0.113.5"],
        protocol=17,
        port=53,
        target=5353,
        flags=1,  # DSR
        mapping_flags=16,  # VipExternalIP
        distribution=2,  # SourceIP
    )
    route = service_route(sim.snapshot(), "203.0.113.5", "udp", 53)
    assert route is not None
    assert (route.affinity, route.preserves_client, route.external) == (True, True, True)
    assert backend_addresses(route) == {("10.244.1.5", 5353)}
    balance(sim, [ids["a"]], ["203.0.113.6"], protocol=132, port=53, distribution=1)
    route = service_route(sim.snapshot(), "203.0.113.6", "sctp", 53)
    assert route is not None
    assert (route.affinity, route.preserves_client, route.external) == (True, False, False)


def test_a_dump_missing_an_endpoint_or_an_internal_port_still_answers() -> None:
    """A real node's dump can be caught mid-change; hcsshim omits a zero InternalPort."""
    sim, ids = pods()
    lb = balance(sim, [ids["a"], ids["b"].lower()], ["10.96.0.10"])
    host = sim.snapshot()
    host["Endpoints"] = [e for e in host["Endpoints"] if e["ID"] != ids["a"]]
    (dumped,) = host["LoadBalancers"]
    del dumped["PortMappings"][0]["InternalPort"]
    route = service_route(host, "10.96.0.10", "tcp", 80)
    assert route is not None and route.load_balancer == lb
    assert route.backends == (Target("10.244.1.6", 80, ids["b"], False, None),)


# --- a property -----------------------------------------------------------------

_VIPS = ["10.96.0.10", "10.96.0.11", "fd00:96::10", NODE_V4, None]  # None: a node port
_requests = st.lists(
    st.tuples(
        st.sampled_from(_VIPS),
        st.sampled_from([6, 17]),
        st.sampled_from([80, 30080]),
        st.booleans(),  # LocalRoutedVIP
        st.booleans(),  # IPv6, for a node port
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(_requests)
def test_at_most_one_load_balancer_answers_any_connection(requests: list[tuple[Any, ...]]) -> None:
    """Frontend uniqueness leaves one LB per VIP:port, and the evaluator names that one.

    Node ports answer where no VIP does; of a node port's two possible LBs
    (with and without LocalRoutedVIP), the one without.
    """
    sim, ids = pods()
    for vip, protocol, port, local, ipv6 in requests:
        try:
            balance(
                sim,
                [ids["a"]],
                [vip] if vip else [],
                protocol=protocol,
                port=port,
                flags=2 if (":" in vip if vip else ipv6) else 0,
                mapping_flags=2 if local else 0,
            )
        except HcnError as exc:
            assert exc.hresult == ERROR_ALREADY_EXISTS  # a frontend already taken
    host = sim.snapshot()
    for dst in {*(v for v in _VIPS if v), *NODE}:
        for protocol, name in ((6, "tcp"), (17, "udp")):
            for port in (80, 30080):
                route = service_route(host, dst, name, port, node_addresses=NODE)
                expected = _by_hand(host, dst, protocol, port)
                assert (route.load_balancer if route else None) == expected


def _by_hand(host: Json, dst: str, protocol: int, port: int) -> str | None:
    """The LB a connection should reach, worked out from the dump the long way."""
    on_port = [
        (lb, lb["PortMappings"][0]["Flags"])
        for lb in host["LoadBalancers"]
        if (lb["PortMappings"][0]["Protocol"], lb["PortMappings"][0]["ExternalPort"])
        == (protocol, port)
    ]
    by_vip = [lb["ID"] for lb, _ in on_port if dst in lb["FrontendVIPs"]]
    assert len(by_vip) <= 1, "two load balancers share a VIP frontend"
    if by_vip:
        return str(by_vip[0])
    if dst not in NODE:
        return None
    family = 2 if ":" in dst else 0  # the IPv6 flag a node port of dst's family has
    node_ports = sorted(
        (flags, str(lb["ID"]))
        for lb, flags in on_port
        if not lb["FrontendVIPs"] and lb["Flags"] == family
    )
    assert len({f for f, _ in node_ports}) == len(node_ports), "two node ports share a frontend"
    return node_ports[0][1] if node_ports else None  # Flags 0 before LocalRoutedVIP (2)
