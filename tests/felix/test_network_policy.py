"""Kubernetes NetworkPolicy under the real Felix, judged by real TCP and UDP.

The real calico-felix (each release, both backends) runs in KDD mode on a
node namespace and starts our ``dataplane-driver`` as its dataplane. Pods
are made by the real Calico CNI plugin with Calico IPAM; NetworkPolicy is
written to the real kube-apiserver; Felix computes the rules and the driver
programs them; connections between the pods say what is in force.
"""

from __future__ import annotations

import pytest

from tests.felix.cluster import Cluster, complaints

pytestmark = pytest.mark.slow

ALL = {("client", "web"): True, ("other", "web"): True, ("web", "client"): True}
WEB = {"matchLabels": {"app": "web"}}


def test_pods_made_by_the_cni_plugin_reach_each_other_with_no_policy(cluster: Cluster) -> None:
    cluster.expect(ALL, what="no policy: every pod reaches every pod (the namespaces' profiles)")
    cluster.expect(ALL, "udp")
    for pod in cluster.pods.values():
        assert pod.iface.startswith("cali")  # named by the CNI plugin, not by us
        assert pod.ipv4.startswith("10.65.")  # from the Calico IPAM pool


def test_ingress_from_pods_on_a_named_port_and_from_a_namespace(cluster: Cluster) -> None:
    from_clients = {
        "podSelector": WEB,
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [{"podSelector": {"matchLabels": {"app": "client"}}}],
                "ports": [{"protocol": "TCP", "port": "http"}],
            }
        ],
    }
    with cluster.netpols("alpha", from_clients):
        cluster.expect(
            {("client", "web"): True, ("other", "web"): False, ("web", "client"): True},
            what="only alpha's clients reach web, on the named port",
        )
        cluster.expect({("client", "web"): False}, "udp", what="UDP is not in the policy")
        from_beta = {
            "podSelector": WEB,
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}]}],
        }
        with cluster.netpols("alpha", from_beta):
            cluster.expect({("client", "web"): True, ("other", "web"): True})
            cluster.expect({("other", "web"): True, ("client", "web"): False}, "udp")
        cluster.expect({("client", "web"): True, ("other", "web"): False})
    cluster.expect(ALL, what="the policies deleted: open again")


def test_default_deny_then_egress_to_an_ip_block_with_an_exception(cluster: Cluster) -> None:
    deny_all = {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    with cluster.netpols("alpha", deny_all):
        cluster.expect(
            {("client", "web"): False, ("other", "web"): False, ("web", "client"): False},
            what="alpha denies all, in and out",
        )
        cluster.expect({("other", "web"): False}, "udp")
        other = cluster.pods["other"].ipv4
        # Egress from web into the whole pool except other's address, UDP only.
        egress = {
            "podSelector": WEB,
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [{"ipBlock": {"cidr": "10.65.0.0/16", "except": [f"{other}/32"]}}],
                    "ports": [{"protocol": "UDP", "port": 5353}],
                }
            ],
        }
        with cluster.netpols("alpha", egress):
            cluster.expect(
                {("web", "db"): True, ("web", "other"): False},
                "udp",
                what=f"web may send UDP into the pool but not to {other}",
            )
            cluster.expect({("web", "db"): False}, what="TCP is not in the egress rule")
    cluster.expect(ALL)


def test_felix_logs_no_warning_or_error_about_its_driver(cluster: Cluster) -> None:
    cluster.expect(ALL)
    assert complaints(cluster.felix.log()) == []  # at start and in steady state


def test_the_backend_felix_asks_for_is_the_one_programmed(cluster: Cluster) -> None:
    """NFTablesMode reaches the driver in Felix's ConfigUpdate; the other backend stays empty."""
    cluster.expect(ALL)
    tables = cluster.node.run("nft", "list", "tables").stdout.split()
    chains = cluster.node.run("iptables-save", "-t", "filter").stdout
    in_nft = any(t.startswith("cali") for t in tables)
    in_iptables = ":cali-" in chains
    if cluster.nftables_mode == "Enabled":
        assert (in_nft, in_iptables) == (True, False)
    else:
        assert (in_nft, in_iptables) == (False, True)


def test_endpoint_status_files_for_every_pod_that_is_up(cluster: Cluster) -> None:
    directory = cluster.felix.status_dir / "endpoint-status"

    def names() -> set[str]:
        return {p.name for p in directory.iterdir()} if directory.exists() else set()

    want = {
        "k8s {}%2F{} eth0".format(*cluster.calico.pod_names[p.netns]) for p in cluster.pods.values()
    }
    cluster.expect(ALL)
    assert names() == want
