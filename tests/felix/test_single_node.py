"""One node under the real Felix: pods by the CNI plugin, policy from the API, real packets.

The real calico-felix (each release, both backends) runs in KDD mode on a
node namespace and starts our ``dataplane-driver`` as its dataplane. Pods
are made by the real Calico CNI plugin with Calico IPAM; Kubernetes
NetworkPolicy is written to the real kube-apiserver; what the driver makes
of Felix's messages is judged by real TCP and UDP between the pods.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from testbed.calico import Calico, Felix
from testbed.calico import unavailable as calico_unavailable
from testbed.control_plane import ControlPlane
from testbed.control_plane import unavailable as cp_unavailable
from testbed.topology import Node, Pod, Proto, Topology
from tests.kernel.marks import KERNEL_UNAVAILABLE
from tests.waiting import eventually

pytestmark = pytest.mark.slow

PORT = 8080
UDP_PORT = 5353
PROGRAMMED = 60.0  # Felix's start, its sync with the API, the driver's first apply


@dataclass
class Cluster:
    calico: Calico
    node: Node
    felix: Felix
    pods: dict[str, Pod] = field(default_factory=dict)

    @property
    def cp(self) -> ControlPlane:
        return self.calico.cp

    def pod(self, namespace: str, name: str, **labels: str) -> Pod:
        ports = [{"name": "http", "containerPort": PORT, "protocol": "TCP"}]
        pod = self.calico.add_pod(self.node, namespace, name, labels, ports)
        pod.listen("tcp", PORT, 4)
        pod.listen("udp", UDP_PORT, 4)
        self.pods[name] = pod
        return pod


@pytest.fixture(scope="module")
def cluster(
    felix_setup: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    release, nftables_mode = felix_setup
    for why in (KERNEL_UNAVAILABLE, cp_unavailable(controller_manager=True)):
        if why is not None:
            pytest.skip(why)
    if (why := calico_unavailable(release)) is not None:
        pytest.skip(why)
    workdir = Path(tmp_path_factory.mktemp(f"felix-{release}"))
    with Topology() as topo, ControlPlane(topo, workdir, controller_manager=True) as cp:
        calico = Calico(cp, release, workdir)
        calico.install()
        node = topo.add_node("node-1")
        calico.add_node(node)
        for ns, labels in (("alpha", {"team": "a"}), ("beta", {"team": "b"})):
            calico.create_namespace(ns, labels)
        felix = calico.start_felix(node, {"FELIX_NFTABLESMODE": nftables_mode})
        cluster = Cluster(calico, node, felix)
        try:
            cluster.pod("alpha", "web", app="web")
            cluster.pod("alpha", "client", app="client")
            cluster.pod("beta", "other", app="client")
            yield cluster
        finally:
            felix.stop()
            _keep_log(felix)


def _keep_log(felix: Felix) -> None:
    """Felix's log on failure is the first thing to read: say where it is."""
    print(f"Felix's log: {felix.log_path}")


def _reaches(src: Pod, dst: Pod, proto: Proto = "tcp", port: int = PORT) -> bool:
    probe = src.connect(proto, dst.ipv4, port if proto == "tcp" else UDP_PORT, timeout=0.5)
    return probe.ok and probe.reply == dst.name


def _verdicts(
    cluster: Cluster, pairs: list[tuple[str, str]], proto: Proto = "tcp"
) -> dict[str, bool]:
    return {f"{a}->{b}": _reaches(cluster.pods[a], cluster.pods[b], proto) for a, b in pairs}


def _expect(
    cluster: Cluster, want: dict[tuple[str, str], bool], proto: Proto = "tcp", what: str = ""
) -> None:
    pairs = list(want)
    expected = {f"{a}->{b}": ok for (a, b), ok in want.items()}
    seen: dict[str, bool] = {}

    def holds() -> bool:
        seen.clear()
        seen.update(_verdicts(cluster, pairs, proto))
        return seen == expected

    try:
        eventually(holds, PROGRAMMED, what or str(expected))
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}; last seen {seen}; Felix's log {cluster.felix.log_path}"
        ) from exc


_names = itertools.count()


def _netpol(cluster: Cluster, namespace: str, spec: dict[str, Any]) -> str:
    name = f"np{next(_names)}"
    cluster.cp.create(
        f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies",
        {"metadata": {"name": name, "namespace": namespace}, "spec": spec},
    )
    return name


def _delete_netpol(cluster: Cluster, namespace: str, name: str) -> None:
    cluster.cp.delete(f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/{name}")


# --- the tests -----------------------------------------------------------------

ALL = {("client", "web"): True, ("other", "web"): True, ("web", "client"): True}


def test_pods_made_by_the_cni_plugin_reach_each_other_with_no_policy(cluster: Cluster) -> None:
    _expect(cluster, ALL, what="no policy: every pod reaches every pod (the namespaces' profiles)")
    _expect(cluster, ALL, "udp")
    for pod in cluster.pods.values():
        assert pod.iface.startswith("cali")  # named by the CNI plugin, not by us
        assert pod.ipv4.startswith("10.65.")  # from the Calico IPAM pool


def test_network_policy_ingress_from_pods_on_a_named_port(cluster: Cluster) -> None:
    name = _netpol(
        cluster,
        "alpha",
        {
            "podSelector": {"matchLabels": {"app": "web"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": {"app": "client"}}}],
                    "ports": [{"protocol": "TCP", "port": "http"}],
                }
            ],
        },
    )
    try:
        _expect(
            cluster,
            {("client", "web"): True, ("other", "web"): False, ("web", "client"): True},
            what="only alpha's clients reach web on the named port",
        )
        _expect(cluster, {("client", "web"): False}, "udp", what="UDP is not in the policy")
        # A namespaceSelector brings the other namespace's pods in.
        more = _netpol(
            cluster,
            "alpha",
            {
                "podSelector": {"matchLabels": {"app": "web"}},
                "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}]}],
            },
        )
        _expect(cluster, {("client", "web"): True, ("other", "web"): True})
        _delete_netpol(cluster, "alpha", more)
        _expect(cluster, {("client", "web"): True, ("other", "web"): False})
    finally:
        _delete_netpol(cluster, "alpha", name)
    _expect(cluster, ALL, what="the policy deleted: open again")


def complaints(log: str) -> list[str]:
    """Felix's WARNING and worse lines, up to its own shutdown.

    From "Felix is shutting down" on, Felix logs a WARNING for any driver
    that exits (``Driver process stopped error=<nil>``), an ERROR for the
    EOF on its pipe and a FATAL to exit (``daemon.go``'s
    ``monitorAndManageShutdown``), whatever the driver did: those are
    Felix's own shutdown, not the driver's doing.
    """
    lines = log.splitlines()
    end = next((i for i, line in enumerate(lines) if "Felix is shutting down" in line), len(lines))
    return [line for line in lines[:end] if re.search(r"\[(WARNING|ERROR|FATAL|PANIC)\]", line)]


def test_felix_logs_no_warning_or_error_about_its_driver(cluster: Cluster) -> None:
    _expect(cluster, ALL)
    assert complaints(cluster.felix.log()) == []


def test_the_backend_felix_asks_for_is_the_one_programmed(
    cluster: Cluster, felix_setup: tuple[str, str]
) -> None:
    """NFTablesMode reaches the driver in Felix's ConfigUpdate; the other backend stays empty."""
    _expect(cluster, ALL)
    tables = cluster.node.run("nft", "list", "tables").stdout.split()
    chains = cluster.node.run("iptables-save", "-t", "filter").stdout
    ours_in_nft = any(t.startswith("cali") for t in tables)
    ours_in_iptables = ":cali-" in chains
    if felix_setup[1] == "Enabled":
        assert (ours_in_nft, ours_in_iptables) == (True, False)
    else:
        assert (ours_in_nft, ours_in_iptables) == (False, True)


def test_endpoint_status_files_for_every_pod_that_is_up(cluster: Cluster) -> None:
    directory = cluster.felix.status_dir / "endpoint-status"

    def names() -> set[str]:
        return {p.name for p in directory.iterdir()} if directory.exists() else set()

    want = {f"k8s {ns}%2F{name} eth0" for ns, name in _api_names(cluster)}
    eventually(lambda: names() == want, PROGRAMMED, f"status files {want}")


def _api_names(cluster: Cluster) -> list[tuple[str, str]]:
    return [cluster.calico.pod_names[p.netns] for p in cluster.pods.values()]
