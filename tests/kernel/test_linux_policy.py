"""The Linux platform on the real kernel: every verdict checked with packets."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable

import pytest

from dataplane.linux.nftables.set_elements import set_name
from dataplane.model import IPSetType
from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.topology import Node, Topology
from tests.conftest import REPO
from tests.kernel import scenario
from tests.kernel.cluster import Cluster, Probe
from tests.kernel.marks import requires_root
from tests.kernel.ruleset import our_rules

pytestmark = [requires_root, pytest.mark.slow]


def matrix() -> list[Probe]:
    """The scenario's expected verdicts (see tests/kernel/scenario.py)."""
    both = (4, 6)
    probes = []
    for family in both:
        probes += [
            Probe("web-1", "api-1", "tcp", 8080, family, True),  # named port, selector
            Probe("web-2", "api-1", "tcp", 8080, family, False),  # blocklisted (security tier)
            Probe("prom-1", "api-1", "tcp", 8080, family, False),  # end-of-tier drop
            Probe("api-2", "api-1", "tcp", 8080, family, False),
            Probe("prom-1", "api-1", "tcp", 9090, family, True),  # range from monitoring
            Probe("prom-1", "api-2", "tcp", 9091, family, True),
            Probe("web-1", "api-1", "tcp", 9090, family, False),  # web egress policy
            Probe("api-1", "db-1", "tcp", 5432, family, True),
            Probe("web-1", "db-1", "tcp", 5432, family, False),
            Probe("prom-1", "db-1", "tcp", 5432, family, False),
            Probe("api-2", "db-1", "udp", 5353, family, True),  # UDP range
            Probe("prom-1", "db-1", "udp", 5353, family, False),
            Probe("db-1", "web-1", "tcp", 80, family, True),  # profiles (no ingress policy)
            Probe("web-2", "web-1", "tcp", 80, family, False),  # web egress end-of-tier
            Probe("prom-1", "web-1", "tcp", 6666, family, True),  # negation: from monitoring
            Probe("db-1", "web-1", "tcp", 6666, family, False),  # negation: others denied
            Probe("db-1", "web-1", "icmp", 0, family, True),
            Probe("prom-1", "api-1", "icmp", 0, family, False),
        ]
        # The host network (kubelet probes, host-network pods) reaches every
        # local pod whatever its policy, and the replies come back even
        # where the pod's egress policy would refuse them as new traffic
        # (web's allows only api, DNS and ICMP) and DefaultEndpointToHostAction
        # is Felix's DROP.
        probes += [
            Probe("node", "api-1", "tcp", 8080, family, True),
            Probe("node", "db-1", "tcp", 80, family, True),  # no ingress rule admits it
            Probe("node", "web-1", "tcp", 80, family, True),
            Probe("node", "web-2", "udp", 5353, family, True),
            Probe("node", "prom-1", "udp", 53, family, True),
            Probe("node", "web-2", "icmp", 0, family, True),
        ]
    probes += [
        Probe("web-1", "api-1", "icmp", 0, 4, True),  # ICMPv4 echo allowed from web
        Probe("web-1", "api-1", "icmp", 0, 6, False),  # no ICMPv6 rule for api
        Probe("web-1", "web-2", "icmp", 0, 4, False),  # web-2 blocklisted (ingress)
    ]
    return probes


@pytest.mark.own_backend
@pytest.mark.parametrize("backend", ["nft", "legacy", "nftables"])
def test_connectivity_matrix_v4_and_v6(topology: Topology, backend: str) -> None:
    cluster = Cluster(topology)
    if backend == "nftables":
        felix = cluster.start_driver(NFTablesMode="Enabled")
    else:
        felix = cluster.start_driver(IptablesBackend=backend)
    try:
        assert cluster.failures(matrix()) == []
        for tool in ("legacy", "nft"):
            saved = cluster.node.run(f"iptables-{tool}-save").stdout
            assert ("cali-FORWARD" in saved) == (tool == backend), tool
        tables = cluster.node.run("nft", "list", "tables").stdout
        assert ("table ip cali\n" in tables) == (backend == "nftables"), tables
    finally:
        felix.close_input()
        code, err = felix.wait()
    assert code == 0, err


def test_nat_outgoing_masquerades_only_masquerade_pools(topology: Topology) -> None:
    cluster = Cluster(topology)
    external = cluster.node.external
    external.listen("tcp", 443)
    felix = cluster.start_driver()
    try:
        prom = cluster.pods["prom-1"]
        assert prom.can_connect("tcp", external.address(4), 443, timeout=3)
        assert prom.can_connect("tcp", external.address(6), 443, timeout=3)
        seen = external.peers("tcp", 443)
        # IPv4 pool has masquerade: the node's address; IPv6 pool has not.
        assert cluster.node.address(4) in seen
        assert prom.ipv6 in seen and prom.ipv4 not in seen
    finally:
        felix.close_input()
        felix.wait()


def test_in_place_updates_follow_and_keep_established_connections(topology: Topology) -> None:
    cluster = Cluster(topology)
    felix = cluster.start_driver()
    prom, web = cluster.pods["prom-1"], cluster.pods["web-1"]
    held = prom.hold("tcp", web.ipv4, 80)
    try:
        # IP set member added: prometheus joins the web selector.
        felix.send(
            pb.IPSetDeltaUpdate(id=scenario.SET_WEB, added_members=scenario.ips("prometheus"))
        )
        cluster.wait_for(Probe("prom-1", "api-1", "tcp", 8080, 4, True))
        cluster.wait_for(Probe("prom-1", "api-1", "tcp", 8080, 6, True))
        assert held.check()
        # ... and removed again.
        felix.send(
            pb.IPSetDeltaUpdate(id=scenario.SET_WEB, removed_members=scenario.ips("prometheus"))
        )
        cluster.wait_for(Probe("prom-1", "api-1", "tcp", 8080, 4, False))
        assert held.check()
        # A policy changes: the monitoring range shrinks to one port.
        changed = scenario.policies()[2]
        assert isinstance(changed, pb.ActivePolicyUpdate)
        changed.policy.inbound_rules[0].dst_ports[0].last = 9090
        felix.send(changed)
        cluster.wait_for(Probe("prom-1", "api-1", "tcp", 9091, 4, False))
        assert cluster.failures([Probe("prom-1", "api-1", "tcp", 9090, 4, True)]) == []
        assert held.check()
        # An endpoint is added (a new api pod) and becomes reachable as policy says.
        api3 = cluster.add_pod("api-3")
        spec = scenario.pod("api-3")
        felix.send(
            pb.IPSetDeltaUpdate(id=scenario.SET_API, added_members=[spec.ipv4, spec.ipv6]),
            pb.IPSetDeltaUpdate(
                id=scenario.SET_HTTP,
                added_members=[f"{spec.ipv4},tcp:8080", f"{spec.ipv6},tcp:8080"],
            ),
            scenario.endpoint(spec, api3.iface),
        )
        cluster.wait_for(Probe("web-1", "api-3", "tcp", 8080, 4, True))
        assert (
            cluster.failures(
                [
                    Probe("web-1", "api-3", "tcp", 8080, 6, True),
                    Probe("prom-1", "api-3", "tcp", 8080, 4, False),
                    Probe("prom-1", "api-3", "tcp", 9090, 4, True),
                ]
            )
            == []
        )
        assert held.check()
        # ... and removed: its route and chains go, so nothing reaches it.
        felix.send(pb.WorkloadEndpointRemove(id=scenario.endpoint_id(spec)))
        cluster.wait_for(Probe("web-1", "api-3", "tcp", 8080, 4, False))
        assert "10.65.0.22" not in cluster.node.ip("route").stdout
        assert held.check()
    finally:
        held.close()
        felix.close_input()
        felix.wait()


class _Tamper:
    """Someone else's hands on our objects, on the backend the driver runs."""

    def __init__(self, node: Node, backend: str) -> None:
        self.node = node
        self.nft = backend == "nftables"

    def chain(self, name: str) -> str:
        """A filter chain of ours, as listed."""
        if self.nft:
            return self.node.run("nft", "list", "chain", "ip", "cali", f"filter-{name}").stdout
        return self.node.run("iptables", "-S", name).stdout

    def ingress_chain(self, iface: str) -> str:
        """The chain judging traffic to workload ``iface``: its own on
        iptables, on nftables the shared one its element in the map reaches."""
        if not self.nft:
            return f"cali-tw-{iface}"
        listed = self.node.run("nft", "list", "map", "ip", "cali", "wl-to").stdout
        found = re.search(rf'"{re.escape(iface)}" : goto filter-(\S+?)[,\s}}]', listed)
        assert found, listed
        return found.group(1)

    def drop_interface_data(self, iface: str) -> None:
        """nftables: ``iface``'s dispatch element and allowed sources go."""
        for name in ("wl-from", "wl-sources"):
            listed = self.node.run(
                "nft", "list", "set" if "sources" in name else "map", "ip", "cali", name
            ).stdout
            items = re.findall(rf'"{re.escape(iface)}" [.:] [^,}}\n]+', listed)
            assert items, listed
            element = "{ " + ", ".join(i.strip() for i in items) + " }"
            self.node.run("nft", "delete", "element", "ip", "cali", name, element)

    def flush_chain(self, name: str) -> None:
        if self.nft:
            self.node.run("nft", "flush", "chain", "ip", "cali", f"filter-{name}")
        else:
            self.node.run("iptables", "-F", name)

    def _set(self, set_id: str) -> str:
        if self.nft:
            return set_name(set_id, 4, IPSetType.IP)
        return f"cali40{set_id}"

    def sets(self) -> list[str]:
        if self.nft:
            listed = self.node.run("nft", "list", "sets", "ip").stdout
            return re.findall(r"^\s*set (\S+) \{", listed, re.MULTILINE)
        return self.node.run("ipset", "list", "-n").stdout.split()

    def members(self, set_id: str) -> str:
        if self.nft:
            return self.node.run("nft", "list", "set", "ip", "cali", self._set(set_id)).stdout
        return self.node.run("ipset", "list", self._set(set_id)).stdout

    def flush_set(self, set_id: str) -> None:
        if self.nft:
            self.node.run("nft", "flush", "set", "ip", "cali", self._set(set_id))
        else:
            self.node.run("ipset", "flush", self._set(set_id))

    def delete_set(self, set_id: str) -> None:
        if self.nft:
            self.node.run("nft", "delete", "set", "ip", "cali", self._set(set_id))
        else:
            self.node.run("ipset", "destroy", self._set(set_id))

    def has_set(self, set_id: str) -> bool:
        return self._set(set_id) in self.sets()


def test_tampering_is_repaired_within_a_refresh_interval(
    topology: Topology, kernel_backend: str
) -> None:
    cluster = Cluster(topology)
    felix = cluster.start_driver(
        IptablesRefreshInterval="1", IpsetsRefreshInterval="1", RouteRefreshInterval="1"
    )
    node = cluster.node
    tamper = _Tamper(node, kernel_backend)
    api = cluster.pods["api-1"]
    try:
        # Someone flushes the api pod's ingress chain: prometheus would get in.
        ingress = tamper.ingress_chain(api.iface)
        tamper.flush_chain(ingress)
        cluster.wait_for(Probe("prom-1", "api-1", "tcp", 8080, 4, False), deadline=10)
        assert re.search(r"-j DROP|\bdrop\b", tamper.chain(ingress))
        if tamper.nft:
            # Someone deletes the web pod's elements: its traffic meets the
            # "unknown workload interface" drop until they are back.
            tamper.drop_interface_data(cluster.pods["web-1"].iface)
            cluster.wait_for(Probe("web-1", "api-1", "tcp", 8080, 4, True), deadline=10)
        # Someone empties the web selector set: web loses access until repaired.
        tamper.flush_set("s:web")
        cluster.wait_for(Probe("web-1", "api-1", "tcp", 8080, 4, True), deadline=10)
        # Someone deletes one of our sets (the kernel only allows that for a
        # set no rule references yet).
        felix.send(pb.IPSetUpdate(id="s:spare", members=["10.65.9.9"]))
        end = time.monotonic() + 10
        while not tamper.has_set("s:spare"):
            assert time.monotonic() < end, "spare set never created"
        tamper.delete_set("s:spare")
        end = time.monotonic() + 10
        while not tamper.has_set("s:spare"):
            assert time.monotonic() < end, "deleted set not repaired"
        assert "10.65.9.9" in tamper.members("s:spare")
        # Someone deletes the route to a pod.
        node.ip("route", "del", f"{api.ipv4}/32")
        cluster.wait_for(Probe("web-1", "api-1", "tcp", 8080, 4, True), deadline=10)
        assert f"{api.ipv4} dev {api.iface}" in node.ip("route").stdout
    finally:
        felix.close_input()
        felix.wait()


def test_restart_keeps_established_connections(topology: Topology) -> None:
    cluster = Cluster(topology)
    felix = cluster.start_driver()
    web, api = cluster.pods["web-1"], cluster.pods["api-1"]
    held = web.hold("tcp", api.ipv4, 8080)
    held6 = web.hold("tcp", api.address(6), 8080)
    try:
        felix.kill()  # a crash: the dataplane stays as programmed
        assert held.check() and held6.check()
        again = cluster.start_driver()  # adopts, then converges in one apply
        assert held.check() and held6.check()
        assert cluster.failures(matrix()[:6]) == []
        again.close_input()
        again.wait()
    finally:
        held.close()
        held6.close()


def test_cleanup_removes_only_what_we_own(topology: Topology) -> None:
    cluster = Cluster(topology)
    node = cluster.node
    node.run("iptables", "-N", "FOREIGN")
    node.run("iptables", "-A", "FORWARD", "-j", "FOREIGN")
    node.run("ipset", "create", "foreign", "hash:ip")
    node.ip("route", "add", "10.99.0.0/24", "via", "192.168.200.2")
    felix = cluster.start_driver()
    felix.close_input()
    felix.wait()
    assert "cali-" in our_rules(node)
    state = ("--sysctl-state", str(cluster.sysctl_state))
    result = topology.run(node, sys.executable, str(REPO / "driver.py"), *state, "cleanup")
    assert result.returncode == 0, result.stderr
    assert "cali" not in our_rules(node)
    saved = node.run("iptables-save").stdout + node.run("ip6tables-save").stdout
    assert "-A FORWARD -j FOREIGN" in saved
    sets = node.run("ipset", "list", "-n").stdout.split()
    assert sets == ["foreign"]
    routes = node.ip("route").stdout
    assert "10.99.0.0/24 via 192.168.200.2" in routes
    assert "10.65.0." not in routes


def test_failsafe_ports_survive_a_deny_all_host_policy(topology: Topology) -> None:
    cluster = Cluster(topology)
    node, external = cluster.node, cluster.node.external
    node.listen("tcp", 22)
    node.listen("tcp", 8000)
    felix = cluster.start_driver()
    try:
        assert external.can_connect("tcp", node.address(4), 8000, timeout=3)
        deny_all = pb.ActivePolicyUpdate(
            id=pb.PolicyID(name="host-deny-all"),
            policy=pb.Policy(tier="default", inbound_rules=[pb.Rule(action="deny")]),
        )
        felix.send(
            deny_all,
            pb.HostEndpointUpdate(
                id=pb.HostEndpointID(endpoint_id="node-eth0"),
                endpoint=pb.HostEndpoint(
                    name="eth0",
                    tiers=[pb.TierInfo(name="default", ingress_policies=[deny_all.id])],
                    expected_ipv4_addrs=[node.address(4)],
                ),
            ),
        )
        status = felix.recv_until("host_endpoint_status_update")[-1]
        assert status.host_endpoint_status_update.status.status == "up"
        end = time.monotonic() + 10
        while external.can_connect("tcp", node.address(4), 8000, timeout=0.7):
            assert time.monotonic() < end, "host policy never applied"
        assert external.can_connect("tcp", node.address(4), 22, timeout=3)
        assert external.can_connect("tcp", node.address(6), 22, timeout=3)
        assert not external.can_connect("tcp", node.address(6), 8000, timeout=0.7)
    finally:
        felix.close_input()
        felix.wait()


def _host_endpoint(
    node_ip: str,
    tiers: list[pb.TierInfo],
    untracked_tiers: list[pb.TierInfo] | None = None,
    pre_dnat_tiers: list[pb.TierInfo] | None = None,
) -> pb.HostEndpointUpdate:
    return pb.HostEndpointUpdate(
        id=pb.HostEndpointID(endpoint_id="node-eth0"),
        endpoint=pb.HostEndpoint(
            name="eth0",
            expected_ipv4_addrs=[node_ip],
            tiers=tiers,
            untracked_tiers=untracked_tiers or [],
            pre_dnat_tiers=pre_dnat_tiers or [],
        ),
    )


def _wait_denied(check: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + 10
    while check():
        assert time.monotonic() < end, f"{what} never became denied"


def test_untracked_policy_bypasses_normal_policy_without_conntrack(topology: Topology) -> None:
    cluster = Cluster(topology)
    node, external = cluster.node, cluster.node.external
    node.listen("tcp", 9000)
    node.listen("tcp", 8000)
    felix = cluster.start_driver()
    deny_all = pb.ActivePolicyUpdate(
        id=pb.PolicyID(name="host-deny-all"),
        policy=pb.Policy(tier="default", inbound_rules=[pb.Rule(action="deny")]),
    )
    # Untracked: both directions need an allow, since replies are untracked too.
    untracked = pb.ActivePolicyUpdate(
        id=pb.PolicyID(name="untracked-9000"),
        policy=pb.Policy(
            tier="default",
            untracked=True,
            inbound_rules=[
                pb.Rule(
                    action="allow",
                    protocol=scenario.TCP,
                    dst_ports=[pb.PortRange(first=9000, last=9000)],
                )
            ],
            outbound_rules=[
                pb.Rule(
                    action="allow",
                    protocol=scenario.TCP,
                    src_ports=[pb.PortRange(first=9000, last=9000)],
                )
            ],
        ),
    )
    try:
        felix.send(
            deny_all,
            untracked,
            _host_endpoint(
                node.address(4),
                tiers=[pb.TierInfo(name="default", ingress_policies=[deny_all.id])],
                untracked_tiers=[
                    pb.TierInfo(
                        name="default",
                        ingress_policies=[untracked.id],
                        egress_policies=[untracked.id],
                    )
                ],
            ),
        )
        _wait_denied(
            lambda: external.can_connect("tcp", node.address(4), 8000, timeout=0.7), "port 8000"
        )
        assert external.can_connect("tcp", node.address(4), 9000, timeout=3)
        assert external.can_connect("tcp", node.address(6), 9000, timeout=3)
        tracked = node.run("conntrack", "-L", "-p", "tcp", "--dport", "9000", check=False)
        assert "dport=9000" not in tracked.stdout
    finally:
        felix.close_input()
        felix.wait()


def test_pre_dnat_policy_drops_before_normal_policy(topology: Topology) -> None:
    cluster = Cluster(topology)
    node, external = cluster.node, cluster.node.external
    node.listen("tcp", 9000)
    node.listen("tcp", 8000)
    felix = cluster.start_driver()
    allow_all = pb.ActivePolicyUpdate(
        id=pb.PolicyID(name="host-allow-all"),
        policy=pb.Policy(tier="default", inbound_rules=[pb.Rule(action="allow")]),
    )
    pre_dnat = pb.ActivePolicyUpdate(
        id=pb.PolicyID(name="prednat-8000"),
        policy=pb.Policy(
            tier="default",
            pre_dnat=True,
            inbound_rules=[
                pb.Rule(
                    action="deny",
                    protocol=scenario.TCP,
                    dst_ports=[pb.PortRange(first=8000, last=8000)],
                )
            ],
        ),
    )
    try:
        assert external.can_connect("tcp", node.address(4), 8000, timeout=3)
        felix.send(
            allow_all,
            pre_dnat,
            _host_endpoint(
                node.address(4),
                tiers=[pb.TierInfo(name="default", ingress_policies=[allow_all.id])],
                pre_dnat_tiers=[pb.TierInfo(name="default", ingress_policies=[pre_dnat.id])],
            ),
        )
        _wait_denied(
            lambda: external.can_connect("tcp", node.address(4), 8000, timeout=0.7), "port 8000"
        )
        assert not external.can_connect("tcp", node.address(6), 8000, timeout=0.7)
        assert external.can_connect("tcp", node.address(4), 9000, timeout=3)
        assert "cali-PREROUTING" in our_rules(node)  # the mangle table's
    finally:
        felix.close_input()
        felix.wait()
