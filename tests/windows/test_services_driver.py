"""Service load balancing on a simulated Windows node, driven through the pipe as Felix does.

Each scenario of the Linux services tests that HNS can express, checked by
the evaluator (:mod:`dataplane.windows.sim.lb_verdict`) on the host file the
driver leaves behind: for a connection to a VIP or node port, which
backends can take it and on which port. The expected answers are written
out by hand from kube-proxy's semantics, not derived from the renderer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message

from dataplane.windows.sim.lb_verdict import ServiceRoute, backend_addresses, service_route
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.felix_harness import FelixHarness
from tests.kernel import scenario as sc
from tests.windows.services_node import (
    LOCAL_V4,
    NODE_B_ADDRESS,
    REMOTE_V4,
    backend,
    backends,
    messages,
    overlay_host,
    service,
)

NODE = "192.168.1.11"  # this node's address, where node ports answer
V6_LOCAL = sc.PODS[0].ipv6
TERMINATING = 1


def _port(name: str, number: int, node_port: int = 0, protocol: str = "TCP") -> pb.ServicePort:
    return pb.ServicePort(Protocol=protocol, Port=number, NodePort=node_port, name=name)


SERVICES: list[Message] = [
    # ClusterIP, both families, spread over local and remote backends.
    service("web", cluster_ips=["10.96.0.10", "fd00:96::10"]),
    backends("web", *LOCAL_V4[:2], *REMOTE_V4[:2], V6_LOCAL),
    # ClientIP affinity.
    service("sticky", cluster_ips=["10.96.0.11"], session_affinity="ClientIP"),
    backends("sticky", LOCAL_V4[0], REMOTE_V4[0]),
    # NodePort, Cluster policy: every backend.
    service("np", type="NodePort", cluster_ips=["10.96.0.12"], ports=[_port("http", 80, 30080)]),
    backends("np", LOCAL_V4[0], REMOTE_V4[1]),
    # Local external policy: node port, external and load-balancer IPs to local backends only.
    service(
        "local",
        type="LoadBalancer",
        cluster_ips=["10.96.0.13"],
        external_ips=["192.0.2.13"],
        loadbalancer_ingress_ips=["198.51.100.13"],
        ports=[_port("http", 80, 30081)],
        external_traffic_policy="Local",
    ),
    backends("local", LOCAL_V4[1], REMOTE_V4[2]),
    # Only terminating backends left: they are used.
    service("term", cluster_ips=["10.96.0.14"]),
    backends(
        "term",
        backend(LOCAL_V4[0], state=TERMINATING),
        backend(REMOTE_V4[0], state=TERMINATING),
    ),
    # A named target port, 8080 on two backends and 9000 on one.
    service("named", cluster_ips=["10.96.0.15"]),
    backends("named", LOCAL_V4[0], REMOTE_V4[0], backend(LOCAL_V4[2], port=9000)),
    # External and load-balancer IPs, Cluster policy; UDP.
    service(
        "ext",
        type="LoadBalancer",
        cluster_ips=["10.96.0.16"],
        external_ips=["192.0.2.16"],
        loadbalancer_ingress_ips=["198.51.100.16"],
        ports=[_port("dns", 53, protocol="UDP")],
    ),
    backends("ext", backend(LOCAL_V4[0], name="dns", protocol="UDP", port=5353)),
    # No backend at all: no load balancer (HNS refuses an empty one).
    service("empty", cluster_ips=["10.96.0.17"]),
    backends("empty"),
]


def run(path: Path, *payloads: Message) -> tuple[str, dict[str, Any]]:
    felix = FelixHarness("--platform", "windows", "--hns-fake", str(path))
    felix.send(*payloads)
    felix.recv_until("dataplane_in_sync", timeout=60)
    felix.close_input()
    code, err = felix.wait(timeout=60)
    assert code == 0, err
    return err, json.loads(path.read_text())


def route(host: dict[str, Any], dst: str, port: int, protocol: str = "tcp") -> ServiceRoute:
    found = service_route(host, dst, protocol, port, node_addresses=(NODE,))
    assert found is not None, f"{dst}:{port} is not load balanced"
    return found


def to(*addresses: str, port: int = 8080) -> set[tuple[str, int]]:
    return {(a, port) for a in addresses}


@pytest.fixture
def host_file(tmp_path: Path) -> Path:
    path = tmp_path / "host.json"
    overlay_host(path=path).flush()
    return path


def test_every_service_scenario_through_the_pipe(host_file: Path) -> None:
    err, host = run(host_file, *messages(*SERVICES))

    web = route(host, "10.96.0.10", 80)
    assert backend_addresses(web) == to(*LOCAL_V4[:2], *REMOTE_V4[:2])
    assert not web.affinity and not web.preserves_client
    remote = {t.address: t.provider_address for t in web.backends if t.remote}
    assert remote == {a: NODE_B_ADDRESS for a in REMOTE_V4[:2]}
    assert backend_addresses(route(host, "fd00:96::10", 80)) == to(V6_LOCAL)

    assert route(host, "10.96.0.11", 80).affinity

    node_port = route(host, NODE, 30080)
    assert backend_addresses(node_port) == to(LOCAL_V4[0], REMOTE_V4[1])
    assert backend_addresses(route(host, "10.96.0.12", 80)) == to(LOCAL_V4[0], REMOTE_V4[1])

    for dst, port in ((NODE, 30081), ("192.0.2.13", 80), ("198.51.100.13", 80)):
        local = route(host, dst, port)
        assert backend_addresses(local) == to(LOCAL_V4[1]), dst
        assert local.preserves_client and local.external, dst  # DSR keeps the client
    assert backend_addresses(route(host, "10.96.0.13", 80)) == to(LOCAL_V4[1], REMOTE_V4[2])

    assert backend_addresses(route(host, "10.96.0.14", 80)) == to(LOCAL_V4[0], REMOTE_V4[0])

    assert backend_addresses(route(host, "10.96.0.15", 80)) == to(LOCAL_V4[0], REMOTE_V4[0])
    assert f"left out (other numbers): {LOCAL_V4[2]}" in err

    for dst in ("10.96.0.16", "192.0.2.16", "198.51.100.16"):
        assert backend_addresses(route(host, dst, 53, "udp")) == to(LOCAL_V4[0], port=5353)
    assert service_route(host, "10.96.0.16", "tcp", 53) is None

    assert service_route(host, "10.96.0.17", "tcp", 80) is None
    assert "prod/empty: tcp 10.96.0.17:80: no usable backend" in err

    # A restart with backends added and removed and a service deleted.
    changed = [
        m
        for m in SERVICES
        if getattr(m, "name", "") not in ("web", "ext") or isinstance(m, pb.ServiceUpdate)
        if getattr(m, "name", "") != "ext"
    ]
    changed.append(backends("web", LOCAL_V4[2], *REMOTE_V4[1:], V6_LOCAL))
    calls = host["Calls"]
    err, host = run(host_file, *messages(*changed))
    web = route(host, "10.96.0.10", 80)
    assert backend_addresses(web) == to(LOCAL_V4[2], *REMOTE_V4[1:])
    for dst in ("10.96.0.16", "192.0.2.16", "198.51.100.16"):
        assert service_route(host, dst, "udp", 53) is None
    new = {k: v - calls.get(k, 0) for k, v in host["Calls"].items()}
    assert new.get("ModifyLoadBalancer") == 1  # web's, in place
    assert new.get("DeleteLoadBalancer") == 3  # ext's three frontends
    assert new.get("CreateLoadBalancer", 0) == 0
    # Remote endpoints are shared: web's new one is "local"'s, its old one others'.
    assert new.get("CreateEndpoint", 0) == new.get("DeleteEndpoint", 0) == 0


def test_bad_service_input_is_one_line_and_changes_nothing(host_file: Path) -> None:
    _, before = run(host_file, *messages(*SERVICES))
    bad = service("web", cluster_ips=["10.96.0.300"])
    err, after = run(host_file, *messages(*SERVICES[:1], bad, *SERVICES[1:]))
    lines = [line for line in err.splitlines() if "10.96.0.300" in line]
    assert len(lines) == 1 and "cluster_ips" in lines[0], err
    assert after["LoadBalancers"] == before["LoadBalancers"]
    assert after["Calls"]["CreateLoadBalancer"] == before["Calls"]["CreateLoadBalancer"]
