"""Changes after sync under the real Felix: each in force, and nothing else rewritten.

A pod added and deleted through the CNI plugin (ADD, DEL), a label
changed, a policy edited and deleted, a namespace deleted: Felix sends the
difference, the driver programs it, real connections judge it, and the
rules in the kernel say what was written (:meth:`Cluster.rules`: nftables
handles, or iptables rules and the driver's count of rule lines written).
"""

from __future__ import annotations

import pytest

from tests.felix.cluster import PROGRAMMED, Cluster
from tests.waiting import eventually

pytestmark = pytest.mark.slow

FROM_CLIENTS = {
    "podSelector": {"matchLabels": {"app": "web"}},
    "policyTypes": ["Ingress"],
    "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}]}],
}


def test_a_label_change_is_in_force_and_rewrites_no_rule(cluster: Cluster) -> None:
    with cluster.netpols("alpha", FROM_CLIENTS):
        cluster.expect({("client", "web"): True, ("other", "web"): False})
        before = (cluster.rules(), cluster.lines_written())
        cluster.label_pod("client", {"app": "visitor"})
        cluster.expect({("client", "web"): False}, what="client no longer selected")
        # Only the selector's IP set lost a member: no rule changed.
        assert (cluster.rules(), cluster.lines_written()) == before
        cluster.label_pod("client", {"app": "client"})
        cluster.expect({("client", "web"): True})
        assert (cluster.rules(), cluster.lines_written()) == before


def test_a_policy_edited_then_deleted(cluster: Cluster) -> None:
    with cluster.netpols("alpha", FROM_CLIENTS) as (name,):
        cluster.expect({("client", "web"): True, ("db", "web"): False})
        edited = {
            **FROM_CLIENTS,
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}]}],
        }
        cluster.replace_netpol("alpha", name, edited)
        cluster.expect({("client", "web"): False, ("db", "web"): True, ("other", "web"): True})
    cluster.expect({("client", "web"): True, ("db", "web"): True}, what="deleted: open again")


def test_a_pod_added_then_deleted_through_cni_del(cluster: Cluster) -> None:
    before = set(cluster.node.run("ip", "-o", "link").stdout.split("\n"))
    with cluster.netpols("alpha", FROM_CLIENTS):
        pod = cluster.pod("alpha", "late", app="client")
        try:
            cluster.expect(
                {("late", "web"): True, ("client", "web"): True, ("late", "db"): True},
                what="the new pod is selected by the existing policy",
            )
            status = cluster.felix.status_dir / "endpoint-status" / "k8s alpha%2Flate eth0"
            eventually(status.exists, PROGRAMMED, "its status file")
            iface, handle = pod.iface, f"k8s-pod-network.c-{pod.netns}"
            assert handle in _ipam_handles(cluster)
            route = cluster.node.run("ip", "route", "show", f"{pod.ipv4}/32").stdout
            assert f"dev {iface}" in route
        finally:
            cluster.remove_pod("late")
        eventually(lambda: not status.exists(), PROGRAMMED, "its status file gone")
        routes = cluster.node.run("ip", "route").stdout
        assert iface not in routes and iface not in cluster.node.run("ip", "link").stdout
        assert handle not in _ipam_handles(cluster)  # Calico IPAM has the address back
        cluster.expect({("client", "web"): True, ("other", "web"): False})
    assert set(cluster.node.run("ip", "-o", "link").stdout.split("\n")) == before


def _ipam_handles(cluster: Cluster) -> set[str]:
    items = cluster.cp.get("/apis/crd.projectcalico.org/v1/ipamhandles")["items"]
    return {h["spec"]["handleID"] for h in items}


def test_a_namespace_deleted_takes_its_pods_and_profile(cluster: Cluster) -> None:
    cluster.calico.create_namespace("gamma", {"team": "c"})
    from_gamma = {
        "podSelector": {"matchLabels": {"app": "web"}},
        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "c"}}}]}],
    }
    with cluster.netpols("alpha", from_gamma):
        cluster.pod("gamma", "visitor", app="client")
        cluster.expect({("visitor", "web"): True, ("client", "web"): False})
        cluster.expect({("client", "visitor"): True}, what="gamma's profile admits all")
        status = cluster.felix.status_dir / "endpoint-status" / "k8s gamma%2Fvisitor eth0"
        assert status.exists()
        cluster.cp.delete("/api/v1/namespaces/gamma")
        # The kubelet's part: tear the sandbox down (CNI DEL) and let the
        # terminating pod go, once the namespace controller deleted it.
        path = "/api/v1/namespaces/gamma/pods/visitor"
        eventually(
            lambda: "deletionTimestamp" in cluster.cp.get(path)["metadata"],
            PROGRAMMED,
            "the namespace controller deletes the pod",
        )
        cluster.remove_pod("visitor")
        eventually(
            lambda: cluster.cp.client.get("/api/v1/namespaces/gamma").status_code == 404,
            PROGRAMMED,
            "the namespace gone",
        )
        eventually(lambda: not status.exists(), PROGRAMMED, "its status file gone")
        cluster.expect({("client", "web"): False, ("other", "web"): False})
