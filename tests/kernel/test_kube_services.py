"""Services from the real Kubernetes API, programmed by the driver, judged by packets.

The driver runs in a node namespace as Felix starts it, with
``DATAPLANE_SERVICES_SOURCE=kubernetes`` and a kubeconfig for the test bed's
real kube-apiserver (joined to the node by a veth). Felix's messages carry
the pods and no service; Services and EndpointSlices are written to the API
as a controller would write them, and connections from a pod to the
cluster IP say which backend served.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.control_plane import ControlPlane, unavailable
from testbed.topology import Topology
from tests.kernel import scenario
from tests.kernel.cluster import Cluster
from tests.kernel.marks import KERNEL_UNAVAILABLE
from tests.kernel.services import served_by
from tests.waiting import eventually

pytestmark = pytest.mark.slow

_names = itertools.count()


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    if KERNEL_UNAVAILABLE is not None:
        pytest.skip(KERNEL_UNAVAILABLE)
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    workdir = Path(tmp_path_factory.mktemp("kube-services"))
    # Without the watch cache, etcd serves watches: a compaction makes an
    # older version expire (410) for certain (docs/kubernetes.md).
    with Topology() as topo, ControlPlane(topo, workdir, watch_cache=False) as cp:
        yield cp


def _endpoint(pod: str, node: str, *, zone: str = "", **conditions: bool) -> dict[str, Any]:
    endpoint = {
        "addresses": [scenario.pod(pod).ipv4],
        "nodeName": node,
        "conditions": {"ready": True, **conditions},
    }
    if zone:
        endpoint["hints"] = {"forZones": [{"name": zone}]}
    return endpoint


HTTP_PORTS = [{"name": "http", "port": 8080, "protocol": "TCP"}]


def _slice(
    ns: str, service: str, endpoints: list[dict[str, Any]], ports: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service}-1",
            "namespace": ns,
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "ports": ports,
        "endpoints": endpoints,
    }


class Api:
    """This test's objects in the real API: a namespace, the node, services, slices."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        index = next(_names)
        self.ns = f"kube{index}"
        self.node = f"node-{index}"
        cp.create("/api/v1/namespaces", {"metadata": {"name": self.ns}})
        cp.create(
            "/api/v1/nodes",
            {"metadata": {"name": self.node, "labels": {"topology.kubernetes.io/zone": "z1"}}},
        )

    def service(self, name: str, **spec: Any) -> str:
        """Create a ClusterIP service (port 80, named http); returns its cluster IP."""
        body = {
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}], **spec},
        }
        created = self.cp.create(self.services, body)
        return str(created["spec"]["clusterIP"])

    @property
    def services(self) -> str:
        return f"/api/v1/namespaces/{self.ns}/services"

    def put_slice(
        self,
        service: str,
        endpoints: list[dict[str, Any]],
        ports: list[dict[str, Any]] = HTTP_PORTS,
    ) -> None:
        path = f"/apis/discovery.k8s.io/v1/namespaces/{self.ns}/endpointslices"
        body = _slice(self.ns, service, endpoints, ports)
        name = body["metadata"]["name"]
        existing = self.cp.client.get(f"{path}/{name}")
        if existing.status_code == 404:
            self.cp.create(path, body)
        else:
            body["metadata"]["resourceVersion"] = existing.json()["metadata"]["resourceVersion"]
            self.cp.request("PUT", f"{path}/{name}", body)


def _start(cluster: Cluster, cp: ControlPlane, api: Api, tmp: Path, *args: str) -> Any:
    server = cp.attach(cluster.node)
    config = tmp / "kubeconfig"
    config.write_text(cp.kubeconfig(server))
    env = {
        **os.environ,
        "DATAPLANE_SERVICES_SOURCE": "kubernetes",
        "DATAPLANE_KUBECONFIG": str(config),
        "DATAPLANE_NODE_NAME": api.node,
    }
    return cluster.start_driver(*args, policies=False, env=env)


def _serves(client: Any, vip: str, pods: set[str], what: str, deadline: float = 30) -> None:
    """Wait until connections to ``vip``:80 are served by exactly ``pods``.

    Fewer endpoints than are programmed come up by chance: 12 connections
    over two endpoints all reach api-2 once in 4,096 checks, and a check
    takes ~30 ms, so the ~10 s the compaction test waits for the driver's
    backoff make ~330 of them: about one run in twelve saw only api-2 while
    both were still programmed. A check that holds is confirmed by 36 more
    connections: 48 in a row, once in 10^14.
    """

    def check() -> bool:
        return (
            set(served_by(client, vip, 80, 12)) == pods
            and set(served_by(client, vip, 80, 36)) == pods
        )

    eventually(check, deadline=deadline, what=what)


# The node namespace's own loopback: nothing else listens there.
OPS = "127.0.0.1:9464"


def _show_services(cluster: Cluster) -> dict[str, Any]:
    """``show --kind service`` run in the node, against the driver's --listen."""
    out = cluster.node.run(
        sys.executable, "-m", "dataplane", "show", "--address", OPS, "--kind", "service", "--json"
    ).stdout
    return {record["id"]: record for record in json.loads(out)["objects"]}


def test_a_cluster_ip_from_the_api_follows_its_endpoint_slice(
    topology: Topology, control_plane: ControlPlane, tmp_path: Path
) -> None:
    api = Api(control_plane)
    vip = api.service("web")
    api.put_slice("web", [_endpoint("api-1", api.node), _endpoint("api-2", api.node)])
    cluster = Cluster(topology)
    felix = _start(cluster, control_plane, api, tmp_path, "--listen", OPS)
    client = cluster.pods["web-1"]
    try:
        _serves(client, vip, {"api-1", "api-2"}, f"{vip}:80 served by both endpoints", deadline=30)
        # The controller marks api-2 not ready: only api-1 serves.
        api.put_slice(
            "web",
            [
                _endpoint("api-1", api.node),
                _endpoint("api-2", api.node, ready=False, serving=False),
            ],
        )
        _serves(client, vip, {"api-1"}, "only the ready endpoint serves", deadline=30)
        # And show says so, with where the service came from.
        web = _show_services(cluster)[f"{api.ns}/web"]
        assert web["source"] == "kubernetes" and web["status"] == "done"
        assert web["frontends"] == [f"{vip}:80/tcp"]
        assert {e["endpoint"]: e["why_not"] or e["chosen"] for e in web["endpoints"]} == {
            f"{scenario.pod('api-1').ipv4}:8080/tcp": ["cluster"],
            scenario.pod("api-2").ipv4: "not ready",
        }
    finally:
        felix.kill()


def test_node_port_with_local_policy_serves_only_this_node_s_endpoints(
    topology: Topology, control_plane: ControlPlane, tmp_path: Path
) -> None:
    """From outside, a Local NodePort reaches only local endpoints; a pod reaches all."""
    api = Api(control_plane)
    spec = {
        "type": "NodePort",
        "externalTrafficPolicy": "Local",
        "ports": [
            {
                "name": "http",
                "port": 80,
                "targetPort": 8080,
                "nodePort": 30580 + (next(_names) % 100),
            }
        ],
    }
    vip = api.service("web", **spec)
    node_port = spec["ports"][0]["nodePort"]  # type: ignore[index]
    api.put_slice("web", [_endpoint("api-1", api.node), _endpoint("api-2", "elsewhere")])
    cluster = Cluster(topology)
    felix = _start(cluster, control_plane, api, tmp_path)
    node, external = cluster.node, cluster.node.external
    try:
        _serves(
            cluster.pods["web-1"],
            vip,
            {"api-1", "api-2"},
            "the cluster IP reaches both endpoints",
            deadline=30,
        )
        assert set(served_by(external, node.address(4), node_port, 12)) == {"api-1"}
    finally:
        felix.kill()


def test_an_api_server_outage_keeps_the_services_and_changes_resume_after_it(
    topology: Topology, control_plane: ControlPlane, tmp_path: Path
) -> None:
    api = Api(control_plane)
    vip = api.service("web")
    api.put_slice("web", [_endpoint("api-1", api.node), _endpoint("api-2", api.node)])
    cluster = Cluster(topology)
    felix = _start(cluster, control_plane, api, tmp_path)
    client = cluster.pods["web-1"]
    try:
        _serves(client, vip, {"api-1", "api-2"}, "both endpoints serve", deadline=30)
        control_plane.stop_apiserver()
        try:
            # Down: the driver's watches fail and retry; what is programmed stays.
            assert set(served_by(client, vip, 80, 12)) == {"api-1", "api-2"}
        finally:
            control_plane.start_apiserver()
        api.put_slice("web", [_endpoint("api-2", api.node)])
        _serves(
            client, vip, {"api-2"}, "the change made after the restart is in force", deadline=60
        )
        felix.close_input()
        code, err = felix.wait(timeout=20)
        assert code == 0, err
        assert "retrying in" in err  # the outage was seen and ridden out
    finally:
        felix.kill()


def test_kube_proxy_cases_from_real_objects(
    topology: Topology, control_plane: ControlPlane, tmp_path: Path
) -> None:
    """Affinity, reject, terminating, internal Local, zone hints, source ranges
    and UDP conntrack, each from objects in the real API server, by packets."""
    api = Api(control_plane)
    here, there = api.node, "elsewhere"
    sticky = api.service("sticky", sessionAffinity="ClientIP")
    api.put_slice("sticky", [_endpoint("api-1", here), _endpoint("api-2", here)])
    empty = api.service("empty")  # no slice: no endpoint serves
    leaving = api.service("leaving")
    api.put_slice("leaving", [_endpoint("api-2", there, ready=False, terminating=True)])
    internal = api.service("internal", internalTrafficPolicy="Local")
    api.put_slice("internal", [_endpoint("api-1", here), _endpoint("api-2", there)])
    hinted = api.service("hinted")  # the node's zone is z1
    api.put_slice(
        "hinted", [_endpoint("api-1", there, zone="z1"), _endpoint("api-2", there, zone="z2")]
    )
    dns_port = [{"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"}]
    dns = api.service("dns", ports=dns_port)
    dns_slice = [{"name": "dns", "port": 5353, "protocol": "UDP"}]
    api.put_slice("dns", [_endpoint("api-1", here)], ports=dns_slice)
    cluster = Cluster(topology)
    node, external = cluster.node, cluster.node.external
    lb_ip = "172.16.9.9"
    api.service("lb", type="LoadBalancer", loadBalancerSourceRanges=[f"{external.address(4)}/32"])
    api.put_slice("lb", [_endpoint("api-1", here)])
    control_plane.patch_status(f"{api.services}/lb", {"loadBalancer": {"ingress": [{"ip": lb_ip}]}})
    external.ip("route", "add", f"{lb_ip}/32", "via", node.address(4))
    felix = _start(cluster, control_plane, api, tmp_path)
    web = cluster.pods["web-1"]
    try:
        eventually(
            lambda: web.connect("tcp", leaving, 80, timeout=1).reply == "api-2",
            deadline=30,
            what="a terminating-only service still serves",
        )
        pinned = served_by(web, sticky, 80, 20)
        assert len(pinned) == 1, pinned  # ClientIP affinity
        start = time.monotonic()
        refused = web.connect("tcp", empty, 80, timeout=3)
        assert not refused.ok and refused.error == "refused", refused
        assert time.monotonic() - start < 1.0  # rejected at once, not a timeout
        assert set(served_by(web, internal, 80, 12)) == {"api-1"}  # only this node's
        assert set(served_by(web, hinted, 80, 12)) == {"api-1"}  # only this zone's
        assert external.connect("tcp", lb_ip, 80, timeout=3).ok
        assert not web.can_connect("tcp", lb_ip, 80, timeout=0.7)  # not in the ranges
        # One UDP flow (same source port) moves with its slice: the driver
        # deletes the conntrack entry that would pin it to the old endpoint.
        first = web.connect("udp", dns, 53, timeout=3, sport=40053)
        assert first.ok and first.reply == "api-1", first
        api.put_slice("dns", [_endpoint("api-2", here)], ports=dns_slice)
        eventually(
            lambda: web.connect("udp", dns, 53, timeout=1, sport=40053).reply == "api-2",
            deadline=15,
            what="the UDP flow on the slice's new endpoint",
        )
    finally:
        felix.kill()


def test_a_compaction_while_the_driver_is_cut_off_is_a_relist_of_only_the_difference(
    topology: Topology, control_plane: ControlPlane, tmp_path: Path
) -> None:
    """The driver's versions are compacted away while it cannot reach the API
    server: its watch is refused with 410, it lists again, and the change
    made meanwhile is in force; what was programmed served all along."""
    api = Api(control_plane)
    vip = api.service("web")
    api.put_slice("web", [_endpoint("api-1", api.node), _endpoint("api-2", api.node)])
    cluster = Cluster(topology)
    felix = _start(cluster, control_plane, api, tmp_path)
    felix.drain()  # its log is read as it comes (stderr_so_far below)
    client = cluster.pods["web-1"]
    try:
        _serves(client, vip, {"api-1", "api-2"}, "both endpoints serve", deadline=30)
        # The kill closes the driver's watches; with its link down it cannot
        # open new ones while the change and the compaction happen.
        control_plane.stop_apiserver()
        cluster.node.ip("link", "set", "kapi0", "down")
        try:
            control_plane.start_apiserver()
            api.put_slice("web", [_endpoint("api-2", api.node)])
            control_plane.compact()
            assert set(served_by(client, vip, 80, 12)) == {"api-1", "api-2"}
        finally:
            cluster.node.ip("link", "set", "kapi0", "up")
        # A 410, not only a resumed watch: seen before the input is closed.
        eventually(
            lambda: "listing again" in felix.stderr_so_far(), deadline=60, what="a 410 and a list"
        )
        _serves(client, vip, {"api-2"}, "the change made while cut off is in force", deadline=60)
        felix.close_input()
        code, err = felix.wait(timeout=20)
        assert code == 0, err
    finally:
        felix.kill()
