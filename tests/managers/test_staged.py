"""Staged policies are computed by Felix and enforced by nobody (Felix's rules/endpoints.go)."""

from __future__ import annotations

from dataplane.managers.resolve import effective_policy
from dataplane.model import Action, DirectionPolicy, PolicyKey, TierInfo, TierPolicies

ENFORCED = PolicyKey("allow-web", "prod", "NetworkPolicy")
STAGED = PolicyKey("lockdown", "prod", "StagedNetworkPolicy")
STAGED_K8S = PolicyKey("deny", "prod", "StagedKubernetesNetworkPolicy")
STAGED_GLOBAL = PolicyKey("lockdown", "", "StagedGlobalNetworkPolicy")


def _resolve(*tiers: TierInfo) -> DirectionPolicy:
    return effective_policy(tiers, ("kns.prod",), lambda _k: True, lambda _p: True).ingress


def test_a_staged_policy_is_left_out_of_its_tier() -> None:
    tier = TierInfo("default", ingress_policies=(STAGED, ENFORCED, STAGED_K8S))
    assert _resolve(tier) == DirectionPolicy(
        (TierPolicies("default", (ENFORCED,), Action.DENY),), ("kns.prod",)
    )


def test_a_tier_of_staged_policies_alone_has_no_end_of_tier_drop() -> None:
    """Left out whole: no jump, no drop; the next tier and the profiles decide."""
    staging = TierInfo("staging", ingress_policies=(STAGED_GLOBAL,))
    default = TierInfo("default", ingress_policies=(ENFORCED,))
    assert _resolve(staging, default).tiers == (TierPolicies("default", (ENFORCED,)),)
    assert _resolve(staging) == DirectionPolicy((), ("kns.prod",))


def test_only_the_staged_kinds_are_staged() -> None:
    assert [k.staged for k in (ENFORCED, STAGED, STAGED_K8S, STAGED_GLOBAL)] == [
        False,
        True,
        True,
        True,
    ]
    assert not PolicyKey("staged-looking-name").staged
