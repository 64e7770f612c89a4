"""Service load balancing on the real kernel, kube-proxy semantics, real packets.

The pods run with allow-all profiles only (policy is covered elsewhere);
services point at pods listening on 8080 (port name "http"), and every
server answers with its pod name, so a reply says which backend served.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import time

import pytest

from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.topology import Namespace, Topology
from tests.kernel import scenario
from tests.kernel.cluster import Cluster
from tests.kernel.marks import requires_root
from tests.kernel.services import VIP4, VIP6, backend_set, served_by, service
from tests.waiting import eventually

pytestmark = [requires_root, pytest.mark.slow]


def backends(
    name: str, pods: list[str], *, remote: tuple[str, ...] = (), state: int = pb.BACKEND_ACTIVE
) -> pb.ServiceBackendsUpdate:
    """``name``'s backends: the scenario's ``pods`` on 8080, all local but ``remote``."""
    return backend_set(
        name,
        [((scenario.pod(p).ipv4, scenario.pod(p).ipv6), p not in remote) for p in pods],
        [pb.ServiceBackendPort(name="http", protocol="TCP", port=8080)],
        state,
    )


def nat_rules(ns: Namespace, family: int) -> list[str]:
    """The nat table's rules (iptables-save lines), from whichever backend holds them."""
    base = "iptables" if family == 4 else "ip6tables"
    lines: list[str] = []
    for mode in ("legacy", "nft"):
        tool = f"{base}-{mode}-save"
        if shutil.which(tool) is not None:
            lines += ns.run(tool, "-t", "nat", check=False).stdout.splitlines()
    return [line for line in lines if line.startswith("-A ")]


def slot_backends(ns: Namespace, family: int, vip: str, port: int) -> list[str]:
    """The backend address of each slot of ``vip:port`` (TCP) in the
    nftables services table (its map ``addr``: frontend . slot -> address)."""
    table = "ip" if family == 4 else "ip6"
    listed = ns.run("nft", "-j", "list", "map", table, "cali-svc", "addr").stdout
    (found,) = [o["map"] for o in json.loads(listed)["nftables"] if "map" in o]
    out = []
    for key, value in found.get("elem", []):
        address, proto, dport, _slot = key["concat"]
        if (address, proto, dport) == (vip, 6, port) or (address, proto, dport) == (
            vip,
            "tcp",
            port,
        ):
            out.append(value)
    return out


def balancing(rules: list[str], vip: str, port: int) -> list[tuple[float | None, str]]:
    """How the kernel picks a backend for ``vip:port``: one (probability, backend
    address) per rule of the chain it jumps to, in order; None for the
    unconditional last rule."""
    (chain,) = {
        m.group(1)
        for line in rules
        if (m := re.search(rf" -d {re.escape(vip)}/\d+ -p tcp .*--dport {port} .*-j (\S+)", line))
    }
    dnat = {
        m.group(1): m.group(2)
        for line in rules
        if (m := re.match(r"-A (\S+) .*-j DNAT --to-destination \[?([^\]]+?)\]?:\d+$", line))
    }
    out: list[tuple[float | None, str]] = []
    for line in rules:
        if line.startswith(f"-A {chain} ") and (m := re.search(r"-j (\S+)$", line)):
            probability = re.search(r"--probability (\S+)", line)
            out.append((float(probability.group(1)) if probability else None, dnat[m.group(1)]))
    return out


def _binomial(n: int, p: float, k: int) -> float:
    return math.exp(
        math.lgamma(n + 1)
        - math.lgamma(k + 1)
        - math.lgamma(n - k + 1)
        + k * math.log(p)
        + (n - k) * math.log(1 - p)
    )


# 900 connections over 3 backends; each must serve 300 +- 75 (a share of
# 1/3 +- 1/12). Even odds fail this with probability <= 3.0e-7 (exact
# binomial tails, union bound over the 3 backends); a 50/25/25 split passes
# it with probability <= 3.2e-7 (its heavy backend, Bin(900, 0.5), would have
# to stay at or under 375). The test checks both figures. ~1 s of traffic.
SPREAD_SAMPLE, SPREAD_SLACK = 900, 75


def test_cluster_ip_spreads_evenly_and_affinity_pins(
    topology: Topology, kernel_backend: str
) -> None:
    names = ["api-1", "api-2", "db-1"]
    n, k = SPREAD_SAMPLE, len(names)
    lo, hi = math.ceil(n / k - SPREAD_SLACK), math.floor(n / k + SPREAD_SLACK)
    even_fails = k * sum(_binomial(n, 1 / k, c) for c in range(n + 1) if not lo <= c <= hi)
    skewed_passes = sum(_binomial(n, 0.5, c) for c in range(lo, hi + 1))
    assert even_fails < 1e-6 and skewed_passes < 1e-6, (even_fails, skewed_passes)

    cluster = Cluster(topology)
    felix = cluster.start_driver(
        policies=False,
        extra=[
            service(),
            backends("web", names),
            service(
                "sticky", cluster_ips=["10.96.0.11", "fd00:96::11"], session_affinity="ClientIP"
            ),
            backends("sticky", names),
        ],
    )
    web = cluster.pods["web-1"]
    try:
        # Equal odds are rendered as 1/k, 1/(k-1), ..., 1/2, then always: each
        # backend's share is (1 - what came before) * its probability = 1/k.
        for family, vip in ((4, VIP4), (6, VIP6)):
            pods = {scenario.pod(p).ipv4 if family == 4 else scenario.pod(p).ipv6 for p in names}
            if kernel_backend == "nftables":
                # The services table: one slot per backend, picked by flow hash.
                slots = slot_backends(cluster.node, family, vip, 80)
                assert sorted(slots) == sorted(pods), slots
                continue
            rules = balancing(nat_rules(cluster.node, family), vip, 80)
            assert sorted(b for _, b in rules) == sorted(pods), rules
            probabilities = [p for p, _ in rules]
            # iptables-save prints the kernel's 31-bit fixed point: 1/3 is 0.33333333349.
            assert probabilities[:-1] == pytest.approx(
                [1 / (k - i) for i in range(k - 1)], abs=1e-9
            )
            assert probabilities[-1] is None, rules
        counts = served_by(web, VIP4, 80, n)
        assert set(counts) == set(names), counts
        assert all(lo <= counts[b] <= hi for b in names), (counts, (lo, hi))
        # The rules above carry the evenness for IPv6; packets show every
        # backend answers (one never seen in 60 draws: p = 3 * (2/3)**60 < 1e-10).
        counts6 = served_by(web, VIP6, 80, 60)
        assert set(counts6) == set(names), counts6
        pinned = served_by(web, "10.96.0.11", 80, 20)
        assert len(pinned) == 1 and next(iter(pinned)) in names, pinned
        pinned6 = served_by(web, "fd00:96::11", 80, 20)
        assert len(pinned6) == 1 and next(iter(pinned6)) in names, pinned6
    finally:
        felix.close_input()
        felix.wait()


def test_host_network_reaches_a_cluster_ip_under_felix_defaults(topology: Topology) -> None:
    """Kubelet and host-network pods use ClusterIPs too (issue 8, defect 5).

    With Felix's DefaultEndpointToHostAction=DROP (the cluster's default
    config) the backend's reply enters cali-wl-to-host; only its
    RELATED,ESTABLISHED accept lets the connection complete.
    """
    cluster = Cluster(topology)
    assert scenario.FELIX_DEFAULTS["DefaultEndpointToHostAction"] == "DROP"
    felix = cluster.start_driver(
        policies=False, extra=[service(), backends("web", ["api-1", "api-2"])]
    )
    try:
        for vip in (VIP4, VIP6):
            counts = served_by(cluster.ns("node"), vip, 80, 20)
            assert set(counts) <= {"api-1", "api-2"} and sum(counts.values()) == 20, (vip, counts)
    finally:
        felix.close_input()
        felix.wait()


def test_node_port_cluster_policy_masquerades_local_policy_keeps_client(
    topology: Topology,
) -> None:
    cluster = Cluster(topology)
    external = cluster.node.external
    felix = cluster.start_driver(
        policies=False,
        extra=[
            service(
                "cluster",
                type="NodePort",
                cluster_ips=["10.96.0.20"],
                ports=[pb.ServicePort(Protocol="TCP", Port=80, NodePort=30080, name="http")],
            ),
            backends("cluster", ["api-1"]),
            # db-1 plays a backend on another node: Local policy must skip it.
            service(
                "local",
                type="NodePort",
                cluster_ips=["10.96.0.21", "fd00:96::21"],
                external_traffic_policy="Local",
                ports=[pb.ServicePort(Protocol="TCP", Port=80, NodePort=30081, name="http")],
            ),
            backends("local", ["api-2", "db-1"], remote=("db-1",)),
        ],
    )
    node = cluster.node
    try:
        result = external.connect("tcp", node.address(4), 30080, timeout=3)
        assert result.ok and result.reply == "api-1"
        assert cluster.pods["api-1"].peers("tcp", 8080) == [node.address(4)]  # masqueraded
        local = served_by(external, node.address(4), 30081, 20)
        assert local == {"api-2": 20}
        local6 = served_by(external, node.address(6), 30081, 10)
        assert local6 == {"api-2": 10}
        assert external.address(4) in cluster.pods["api-2"].peers("tcp", 8080)  # client kept
        # From a pod, the same node port reaches every backend, local or not.
        from_pod = served_by(cluster.pods["web-1"], node.address(4), 30081, 40)
        assert set(from_pod) == {"api-2", "db-1"}, from_pod
    finally:
        felix.close_input()
        felix.wait()


def test_source_ranges_no_backends_and_terminating(topology: Topology) -> None:
    cluster = Cluster(topology)
    node, external = cluster.node, cluster.node.external
    external.ip("route", "add", "172.16.9.9/32", "via", node.address(4))
    felix = cluster.start_driver(
        policies=False,
        extra=[
            service(
                "lb",
                type="LoadBalancer",
                cluster_ips=["10.96.0.30"],
                loadbalancer_ip="172.16.9.9",
                load_balancer_source_ranges=[f"{external.address(4)}/32"],
            ),
            backends("lb", ["api-1"]),
            service("empty", cluster_ips=["10.96.0.31"]),
            backends("empty", []),  # known to have none: refused at once
            service("leaving", cluster_ips=["10.96.0.32"]),
            backends("leaving", ["api-2"], state=pb.BACKEND_TERMINATING),
        ],
    )
    web = cluster.pods["web-1"]
    try:
        assert external.connect("tcp", "172.16.9.9", 80, timeout=3).ok
        assert not web.can_connect("tcp", "172.16.9.9", 80, timeout=0.7)  # not in range
        start = time.monotonic()
        refused = web.connect("tcp", "10.96.0.31", 80, timeout=3)
        assert not refused.ok and refused.error == "refused"
        assert time.monotonic() - start < 1.0  # rejected at once, not a timeout
        result = web.connect("tcp", "10.96.0.32", 80, timeout=3)
        assert result.ok and result.reply == "api-2"  # terminating-only still serves
    finally:
        felix.close_input()
        felix.wait()


_HTTP_GET = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
s.sendall(b"GET /healthz HTTP/1.1\\r\\nHost: node\\r\\n\\r\\n")
data = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
print(data.decode())
"""


def test_health_check_node_port_follows_local_backends(topology: Topology) -> None:
    cluster = Cluster(topology)
    node, external = cluster.node, cluster.node.external
    local_service = service(
        "hc",
        type="LoadBalancer",
        cluster_ips=["10.96.0.40"],
        external_traffic_policy="Local",
        health_check_node_port=32000,
        ports=[pb.ServicePort(Protocol="TCP", Port=80, NodePort=30090, name="http")],
    )
    felix = cluster.start_driver(policies=False, extra=[local_service, backends("hc", ["api-1"])])

    def health() -> str:
        end = time.monotonic() + 10
        while True:
            got = external.run("python3", "-c", _HTTP_GET, node.address(4), "32000", check=False)
            if got.returncode == 0 or time.monotonic() > end:
                return got.stdout

    try:
        answer = health()
        assert answer.startswith("HTTP/1.1 200") and '"localEndpoints": 1' in answer
        assert '"name": "hc"' in answer
        felix.send(backends("hc", ["db-1"], remote=("db-1",)))
        end = time.monotonic() + 10
        while not (answer := health()).startswith("HTTP/1.1 503"):
            assert time.monotonic() < end, answer
        assert '"localEndpoints": 0' in answer
    finally:
        felix.close_input()
        felix.wait()


def test_changing_one_service_keeps_anothers_connections(topology: Topology) -> None:
    cluster = Cluster(topology)
    felix = cluster.start_driver(
        policies=False,
        extra=[
            service(),
            backends("web", ["api-1"]),
            service("other", cluster_ips=["10.96.0.50"]),
            backends("other", ["api-2"]),
        ],
    )
    web = cluster.pods["web-1"]
    held = web.hold("tcp", VIP4, 80)
    try:
        for pods in (["db-1"], ["api-2", "db-1"], ["db-1", "prom-1"], []):
            felix.send(backends("other", pods))
            assert held.check()
        end = time.monotonic() + 10
        while web.can_connect("tcp", "10.96.0.50", 80, timeout=0.5):
            assert time.monotonic() < end, "emptied service still answers"
        assert held.check()
    finally:
        held.close()
        felix.close_input()
        felix.wait()


def test_policy_applies_to_service_traffic_after_dnat(topology: Topology) -> None:
    """api's ingress policy admits web (on the named port) but not prometheus."""
    cluster = Cluster(topology)
    felix = cluster.start_driver(extra=[service(), backends("web", ["api-1"])])
    try:
        result = cluster.pods["web-1"].connect("tcp", VIP4, 80, timeout=3)
        assert result.ok and result.reply == "api-1"
        assert cluster.pods["web-1"].connect("tcp", VIP6, 80, timeout=3).ok
        assert not cluster.pods["prom-1"].can_connect("tcp", VIP4, 80, timeout=0.7)
    finally:
        felix.close_input()
        felix.wait()


def test_udp_flow_leaves_a_removed_backend_at_once(topology: Topology) -> None:
    # A UDP client that keeps its source port is one conntrack entry for as
    # long as it keeps sending; without cleanup it would stay DNATed to a
    # removed backend (still alive here, so it would still answer) until
    # the entry idles out. kube-proxy deletes those entries; so do we.
    dns = [pb.ServicePort(Protocol="UDP", Port=53, name="dns")]

    def dns_backends(pods: list[str]) -> pb.ServiceBackendsUpdate:
        update = backends("dns", pods)
        for b in update.backends:
            del b.ports[:]
            b.ports.append(pb.ServiceBackendPort(name="dns", protocol="UDP", port=5353))
        return update

    cluster = Cluster(topology)
    felix = cluster.start_driver(
        policies=False,
        extra=[service("dns", cluster_ips=["10.96.0.53"], ports=dns), dns_backends(["api-1"])],
    )
    web = cluster.pods["web-1"]
    try:
        first = web.connect("udp", "10.96.0.53", 53, timeout=3, sport=40053)
        assert first.ok and first.reply == "api-1", first
        felix.send(dns_backends(["api-2"]))
        end = time.monotonic() + 10
        while True:
            again = web.connect("udp", "10.96.0.53", 53, timeout=1, sport=40053)
            if again.ok and again.reply == "api-2":
                break
            assert time.monotonic() < end, f"flow still on the removed backend: {again}"
    finally:
        felix.close_input()
        felix.wait()


def _ours_naming(node: Namespace, address: str) -> list[str]:
    """Every rule, set element or map entry of either backend that names ``address``."""
    dumps = [node.run("nft", "list", "ruleset").stdout]
    dumps += [node.run(f"iptables-{mode}-save").stdout for mode in ("legacy", "nft")]
    return [line for dump in dumps for line in dump.splitlines() if address in line]


def test_a_service_felix_sends_without_backends_is_not_programmed(
    topology: Topology, kernel_backend: str
) -> None:
    # As the real Felix in KDD mode sends them: every Service, never its
    # backends. Felix's own iptables and nftables dataplanes leave services
    # to kube-proxy, and so does the driver: nothing of ours names the VIP
    # (it once became a REJECT on every node beside kube-proxy).
    kube_vip = "10.96.0.1"
    cluster = Cluster(topology)
    felix = cluster.start_driver(
        policies=False, extra=[service("kubernetes", cluster_ips=[kube_vip])]
    )
    try:
        assert _ours_naming(cluster.node, kube_vip) == []
        # An embedder or a log that says the service has no backends gets
        # it refused at once: the check above can see a programmed VIP.
        felix.send(backends("kubernetes", []))
        eventually(
            lambda: _ours_naming(cluster.node, kube_vip) != [],
            15.0,
            "a service with known backends (none) is programmed",
        )
    finally:
        felix.close_input()
        felix.wait()
