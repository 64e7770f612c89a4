"""Calico's own policy through the real calicoctl, under the real Felix, judged by packets.

Tiers ahead of the default one with Deny and Pass, a GlobalNetworkPolicy,
a staged policy (recorded, never enforced) and a GlobalNetworkSet used in
a selector: written with calicoctl (KDD), computed by Felix, programmed by
the driver, judged by real TCP between the pods of :mod:`tests.felix.cluster`.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.felix.cluster import Cluster, verdicts

pytestmark = pytest.mark.slow

V3 = "projectcalico.org/v3"
ALL = {
    ("client", "web"): True,
    ("other", "web"): True,
    ("db", "web"): True,
    ("web", "db"): True,
    ("other", "db"): True,
}


def _tier(name: str, order: int) -> dict[str, Any]:
    return {"apiVersion": V3, "kind": "Tier", "metadata": {"name": name}, "spec": {"order": order}}


def _policy(kind: str, name: str, spec: dict[str, Any], namespace: str | None = None) -> Any:
    meta: dict[str, str] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": V3, "kind": kind, "metadata": meta, "spec": spec}


def test_a_tier_ahead_of_default_denies_and_passes(cluster: Cluster) -> None:
    deny_beta: dict[str, Any] = {
        "tier": "security",
        "order": 10,
        "selector": "app == 'web'",
        "types": ["Ingress"],
        "ingress": [{"action": "Deny", "source": {"namespaceSelector": "team == 'b'"}}],
    }
    policy = _policy("NetworkPolicy", "security.guard-web", deny_beta, "alpha")
    with cluster.calico_resources(_tier("security", 100), policy):
        cluster.expect(
            {("other", "web"): False, ("db", "web"): False, ("client", "web"): False},
            what="Deny for beta, and the tier's end drops what no rule matched",
        )
        cluster.expect({("web", "db"): True, ("other", "db"): True})
        # Edited: what the Deny leaves is passed on to the default tier,
        # where nothing applies to web, so its namespace's profile allows.
        deny_beta["ingress"].append({"action": "Pass"})
        cluster.calico.apply(policy)
        cluster.expect({("other", "web"): False, ("db", "web"): False, ("client", "web"): True})
    cluster.expect(ALL, what="tier and policy deleted")


def test_a_global_policy_and_a_staged_one_that_is_never_enforced(cluster: Cluster) -> None:
    only_web_to_db = {
        "selector": "app == 'db'",
        "types": ["Ingress"],
        "ingress": [{"action": "Allow", "source": {"selector": "app == 'web'"}}],
    }
    staged_deny_all = {"selector": "all()", "types": ["Ingress", "Egress"]}
    resources = (
        _policy("StagedGlobalNetworkPolicy", "deny-everything", staged_deny_all),
        _policy("GlobalNetworkPolicy", "only-web-to-db", only_web_to_db),
    )
    with cluster.calico_resources(*resources):
        # The staged policy went in first: by the time the global one is in
        # force, Felix has sent it too, and it must change nothing.
        cluster.expect(
            {("web", "db"): True, ("other", "db"): False, ("client", "web"): True},
            what="db admits web only; the staged deny-all is not enforced",
        )
    cluster.expect(ALL)


def test_a_global_network_set_in_a_selector(cluster: Cluster) -> None:
    trusted: dict[str, Any] = {
        "apiVersion": V3,
        "kind": "GlobalNetworkSet",
        "metadata": {"name": "trusted", "labels": {"role": "trusted"}},
        "spec": {"nets": [f"{cluster.pods['db'].ipv4}/32"]},
    }
    from_trusted = {
        "selector": "app == 'web'",
        "types": ["Ingress"],
        "ingress": [{"action": "Allow", "source": {"selector": "role == 'trusted'"}}],
    }
    resources = (trusted, _policy("GlobalNetworkPolicy", "web-from-trusted", from_trusted))
    with cluster.calico_resources(*resources):
        cluster.expect(
            {("db", "web"): True, ("client", "web"): False, ("other", "web"): False},
            what="web admits the network set's addresses only",
        )
        # The set grows: other's address joins it (an IP set change, no rule change).
        trusted["spec"]["nets"].append(f"{cluster.pods['other'].ipv4}/32")
        cluster.calico.apply(trusted)
        cluster.expect({("db", "web"): True, ("other", "web"): True, ("client", "web"): False})
    cluster.expect(ALL)


def _host_reached(cluster: Cluster, port: int) -> bool:
    probe = cluster.external.connect("tcp", cluster.node.address(4), port, timeout=0.5)
    return probe.ok and probe.reply == cluster.node.name


def _expect_host(cluster: Cluster, want: dict[int, bool], what: str) -> None:
    named = {f"external->node:{port}": ok for port, ok in want.items()}
    verdicts(lambda port: _host_reached(cluster, port), named, want, what)


def test_a_host_endpoint_with_pre_dnat_and_untracked_policy(cluster: Cluster) -> None:
    """The node's uplink as a HostEndpoint, judged from the external host."""
    for port in (7000, 7001, 7002):
        cluster.node.listen("tcp", port, 4)
    _expect_host(cluster, {7000: True, 7001: True, 7002: True}, "no host endpoint: open")
    uplink = "role == 'uplink'"
    hep = {
        "apiVersion": V3,
        "kind": "HostEndpoint",
        "metadata": {"name": "node-1-eth0", "labels": {"role": "uplink"}},
        "spec": {
            "node": "node-1",
            "interfaceName": "eth0",
            "expectedIPs": [cluster.node.address(4)],
        },
    }
    normal: dict[str, Any] = {
        "selector": uplink,
        "types": ["Ingress"],
        "ingress": [{"action": "Deny"}],
    }
    pre_dnat = {
        "selector": uplink,
        "preDNAT": True,
        "applyOnForward": True,
        "types": ["Ingress"],
        "ingress": [{"action": "Deny", "protocol": "TCP", "destination": {"ports": [7001]}}],
    }
    # Untracked: replies are untracked too, so both directions need an allow.
    untracked = {
        "selector": uplink,
        "doNotTrack": True,
        "applyOnForward": True,
        "types": ["Ingress", "Egress"],
        "ingress": [{"action": "Allow", "protocol": "TCP", "destination": {"ports": [7002]}}],
        "egress": [{"action": "Allow", "protocol": "TCP", "source": {"ports": [7002]}}],
    }
    normal_policy = _policy("GlobalNetworkPolicy", "uplink-normal", normal)
    resources = (
        hep,
        normal_policy,
        _policy("GlobalNetworkPolicy", "uplink-pre-dnat", pre_dnat),
        _policy("GlobalNetworkPolicy", "uplink-untracked", untracked),
    )
    with cluster.calico_resources(*resources):
        _expect_host(
            cluster,
            {7000: False, 7001: False, 7002: True},
            "normal policy denies; the untracked allow goes round it",
        )
        normal["ingress"] = [{"action": "Allow"}]
        cluster.calico.apply(normal_policy)
        _expect_host(
            cluster, {7000: True, 7001: False, 7002: True}, "the pre-DNAT deny holds before it"
        )
        cluster.expect({("client", "web"): True}, what="the pods are not the host")
    _expect_host(cluster, {7000: True, 7001: True, 7002: True}, "host endpoint gone: open")
