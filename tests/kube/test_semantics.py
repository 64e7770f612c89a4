"""kube-proxy's reading of Services and EndpointSlices, and its choice of endpoints.

The property test holds :func:`dataplane.kube.endpoints.backends` plus the
model's ``usable()`` to a plain transcription of kube-proxy's
``CategorizeEndpoints`` (pkg/proxy/topology.go, v1.33.13, with
PreferSameTrafficDistribution on), endpoint by endpoint, over generated
slices.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.errors import InputError
from dataplane.kube.endpoints import NodeInfo, backends, parse_slice
from dataplane.kube.services import service
from dataplane.model.services import Backend, BackendState, Service, ServiceKey, ServicePort

RANGES = ((30000, 32767),)


def _svc(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "web"},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}], **spec},
        "status": status or {},
    }


# --- Services -----------------------------------------------------------------------------


def test_headless_and_external_name_services_are_not_proxied() -> None:
    assert service(_svc({"clusterIP": "None"}), RANGES) is None
    assert service(_svc({"type": "ExternalName", "externalName": "x.example"}), RANGES) is None


def test_a_dual_stack_service_has_both_cluster_ips() -> None:
    got = service(_svc({"clusterIPs": ["10.96.0.10", "fd00:96::10"]}), RANGES)
    assert got is not None and got.cluster_ips == ("10.96.0.10", "fd00:96::10")


def test_external_local_counts_only_where_outside_traffic_can_come() -> None:
    cluster_ip = service(_svc({"externalTrafficPolicy": "Local"}), RANGES)
    with_external = service(
        _svc({"externalTrafficPolicy": "Local", "externalIPs": ["192.0.2.7"]}), RANGES
    )
    assert cluster_ip is not None and not cluster_ip.external_local
    assert with_external is not None and with_external.external_local


def test_health_check_node_port_only_for_a_local_load_balancer() -> None:
    spec = {
        "type": "LoadBalancer",
        "externalTrafficPolicy": "Local",
        "healthCheckNodePort": 32000,
        "ports": [{"port": 80, "nodePort": 30080}],
    }
    assert service(_svc(spec), RANGES) == Service(
        key=ServiceKey("ns", "web"),
        type="LoadBalancer",
        cluster_ips=("10.96.0.10",),
        ports=(ServicePort("", "tcp", 80, 30080),),
        external_local=True,
        health_check_node_port=32000,
    )
    node_port = service(_svc({**spec, "type": "NodePort"}), RANGES)
    assert node_port is not None and node_port.health_check_node_port == 0


def test_load_balancer_ips_in_vip_mode_only_and_affinity_with_its_timeout() -> None:
    status = {
        "loadBalancer": {
            "ingress": [
                {"ip": "192.0.2.1"},
                {"ip": "192.0.2.2", "ipMode": "Proxy"},
                {"hostname": "lb.example"},
                {"ip": "192.0.2.3", "ipMode": "VIP"},
            ]
        }
    }
    spec = {
        "type": "LoadBalancer",
        "sessionAffinity": "ClientIP",
        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
        "loadBalancerSourceRanges": [" 198.51.100.0/24 "],
    }
    got = service(_svc(spec, status), RANGES)
    assert got is not None
    assert got.load_balancer_ips == ("192.0.2.1", "192.0.2.3")
    assert (got.session_affinity, got.affinity_timeout) == (True, 60)
    assert got.source_ranges == ("198.51.100.0/24",)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"ports": [{"port": 70000}]}, "spec.ports[0].port"),
        ({"ports": [{"port": 80, "protocol": "ICMP"}]}, "spec.ports[0].protocol"),
        ({"ports": [{"port": 80, "nodePort": 80}]}, "spec.ports[0].nodePort"),
        ({"clusterIPs": ["10.96.0.999"]}, "spec.clusterIPs[0]"),
        ({"internalTrafficPolicy": "Nearby"}, "spec.internalTrafficPolicy"),
    ],
)
def test_a_value_the_model_cannot_take_names_its_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as info:
        service(_svc(spec), RANGES)
    assert info.value.field == field


# --- EndpointSlices -----------------------------------------------------------------------


def _slice(name: str, family: str, ports: list[dict[str, Any]], *eps: dict[str, Any]) -> Any:
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "labels": {"kubernetes.io/service-name": "web"},
        },
        "addressType": family,
        "ports": ports,
        "endpoints": list(eps),
    }


def test_a_slice_s_bad_values_are_refused_naming_them() -> None:
    bad_family = _slice("a", "IPv4", [], {"addresses": ["fd00::1"]})
    with pytest.raises(InputError, match=r"endpoints\[0\]\.addresses\[0\]='fd00::1'"):
        parse_slice(bad_family)
    no_label = _slice("a", "IPv4", [])
    no_label["metadata"]["labels"] = {}
    with pytest.raises(InputError, match=r"kubernetes\.io/service-name"):
        parse_slice(no_label)
    with pytest.raises(InputError, match=r"ports\[0\]\.port"):
        parse_slice(_slice("a", "IPv4", [{"name": "http", "port": 0x10000}]))
    assert parse_slice(_slice("a", "FQDN", [], {"addresses": ["db.example"]})) is None
    # Each field an endpoint is read from, named when it is not what it must be.
    ok: dict[str, Any] = {"addresses": ["10.0.0.1"]}
    cases: list[tuple[Any, str]] = [
        ({**ok, "conditions": ["ready"]}, r"endpoints\[1\]\.conditions="),
        ({**ok, "conditions": {"serving": "yes"}}, r"endpoints\[1\]\.conditions\.serving="),
        ({**ok, "conditions": {"terminating": 1}}, r"endpoints\[1\]\.conditions\.terminating="),
        ({**ok, "hints": "zone-a"}, r"endpoints\[1\]\.hints="),
        ({**ok, "hints": {"forZones": {"name": "a"}}}, r"endpoints\[1\]\.hints\.forZones="),
        ({**ok, "hints": {"forNodes": "n1"}}, r"endpoints\[1\]\.hints\.forNodes="),
        ({"addresses": "10.0.0.1"}, r"endpoints\[1\]\.addresses="),
        ("10.0.0.1", r"endpoints\[1\]="),
    ]
    for endpoint, field in cases:
        with pytest.raises(InputError, match=field):
            parse_slice(_slice("a", "IPv4", [], ok, endpoint))


def test_ports_by_name_with_each_slice_s_number_and_duplicates_merged() -> None:
    one = _slice("a", "IPv4", [{"name": "http", "port": 8080}], {"addresses": ["10.65.0.1"]})
    two = _slice(
        "b",
        "IPv4",
        [{"name": "http", "port": 9090}],
        {"addresses": ["10.65.0.2"]},
        {"addresses": ["10.65.0.1"]},
    )
    again = _slice("c", "IPv4", [{"name": "http", "port": 8080}], {"addresses": ["10.65.0.1"]})
    slices = [s for s in map(parse_slice, [one, two, again]) if s is not None]
    got = {(b.address, b.ports[0].port) for b in backends(slices, NodeInfo("n1"))}
    assert got == {("10.65.0.1", 8080), ("10.65.0.1", 9090), ("10.65.0.2", 9090)}


# --- the choice of endpoints, against kube-proxy's CategorizeEndpoints ------------------------

NODES = ("n1", "n2", "n3")
ZONES = ("z1", "z2")


@st.composite
def _endpoints(draw: st.DrawFn) -> dict[str, Any]:
    conditions = {
        key: value
        for key, value in (
            ("ready", draw(st.sampled_from([None, True, False]))),
            ("serving", draw(st.sampled_from([None, True, False]))),
            ("terminating", draw(st.sampled_from([None, True, False]))),
        )
        if value is not None
    }
    hints: dict[str, Any] = {}
    if draw(st.booleans()):
        hints["forZones"] = [{"name": z} for z in draw(st.sets(st.sampled_from(ZONES)))]
    if draw(st.booleans()):
        hints["forNodes"] = [{"name": n} for n in draw(st.sets(st.sampled_from(NODES)))]
    return {
        "addresses": [f"10.65.0.{draw(st.integers(1, 6))}"],
        "conditions": conditions,
        "nodeName": draw(st.sampled_from(NODES)),
        "hints": hints,
    }


def _reference(eps: list[dict[str, Any]], node: NodeInfo, local: bool) -> set[str]:
    """CategorizeEndpoints for one service port, transcribed: the addresses chosen."""
    infos: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for e in eps:  # endpointslicecache: dedup by address, a local one wins
        c = e["conditions"]
        info = {
            "ip": e["addresses"][0],
            "ready": c.get("ready", True),
            "serving": c.get("serving", True),
            "terminating": c.get("terminating", False),
            "local": e["nodeName"] == node.name,
            "zones": {z["name"] for z in e["hints"].get("forZones", [])},
            "nodes": {n["name"] for n in e["hints"].get("forNodes", [])},
        }
        if info["ip"] not in seen:
            seen[info["ip"]] = len(infos)
            infos.append(info)
        elif info["local"]:
            infos[seen[info["ip"]]] = info
    if local:
        ready = [i["ip"] for i in infos if i["local"] and i["ready"]]
        if ready:
            return set(ready)
        return {i["ip"] for i in infos if i["local"] and i["serving"] and i["terminating"]}
    mode = ""
    ready_infos = [i for i in infos if i["ready"]]
    if ready_infos:
        if all(i["nodes"] for i in ready_infos) and any(
            node.name in i["nodes"] for i in ready_infos
        ):
            mode = "node"
        elif all(i["zones"] for i in ready_infos) and any(
            node.zone in i["zones"] for i in ready_infos
        ):
            mode = "zone"

    def available(i: dict[str, Any]) -> bool:
        if mode == "node":
            return node.name in i["nodes"]
        if mode == "zone":
            return node.zone in i["zones"]
        return True

    cluster = {i["ip"] for i in infos if i["ready"] and available(i)}
    return cluster or {i["ip"] for i in infos if i["serving"] and i["terminating"]}


def _chosen(chosen: tuple[Backend, ...]) -> set[str]:
    return {b.address for b in chosen if b.port_for(ServicePort("http", "tcp", 80)) is not None}


@settings(max_examples=400, deadline=None)
@given(
    eps=st.lists(_endpoints(), max_size=8),
    node=st.builds(NodeInfo, st.sampled_from(NODES), st.sampled_from(("", *ZONES))),
)
def test_the_endpoints_chosen_are_kube_proxy_s(eps: list[dict[str, Any]], node: NodeInfo) -> None:
    parsed = parse_slice(_slice("a", "IPv4", [{"name": "http", "port": 8080}], *eps))
    assert parsed is not None
    svc = Service(
        key=ServiceKey("ns", "web"),
        ports=(ServicePort("http", "tcp", 80),),
        backends=backends([parsed], node),
    )
    assert _chosen(svc.usable(local_only=False)) == _reference(eps, node, local=False)
    assert _chosen(svc.usable(local_only=True)) == _reference(eps, node, local=True)
    for b in svc.backends:
        assert b.state in (BackendState.ACTIVE, BackendState.TERMINATING)


def _address_slice(address: object, kind: str = "IPv4") -> dict[str, Any]:
    return {
        "metadata": {"name": "s", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": kind,
        "ports": [],
        "endpoints": [{"addresses": [address]}],
    }


@settings(max_examples=500)
@given(
    st.one_of(
        st.ip_addresses().map(str),
        st.ip_addresses(v=6).map(lambda ip: ip.exploded),
        st.text(alphabet="0123456789abcdef.:x ", max_size=40),
        st.integers(0, 255).map(lambda i: f"0{i}.1.2.3"),
        st.integers(),
    ),
    st.sampled_from(["IPv4", "IPv6"]),
)
def test_slice_addresses_are_read_as_ipaddress_reads_them(address: object, kind: str) -> None:
    """The IPv4 fast path (the C library's parser) takes and prints exactly
    what ``ipaddress`` does; anything else is refused, naming the field."""
    want = None  # an integer is no address in JSON
    if isinstance(address, str):
        try:
            ip = ipaddress.ip_address(address)
            want = str(ip) if ip.version == (4 if kind == "IPv4" else 6) else None
        except ValueError:
            pass
    try:
        parsed = parse_slice(_address_slice(address, kind))
        assert parsed is not None
        got: str | None = parsed.endpoints[0].address
    except InputError as exc:
        assert "endpoints[0].addresses[0]" in str(exc)
        got = None
    assert got == want
