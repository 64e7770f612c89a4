"""Effective policy: an endpoint's tiers and profiles against what is active.

Pure. Felix sends each endpoint its ordered tiers of policy ids and its
profile ids; which of those are active changes as policies and profiles
come and go. What a platform must enforce is the resolution of the two, and
it is the same on every platform, so it is computed here, once.
Staged policies are left out: Felix sends them for flow logs, and enforces
none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dataplane.model import (
    DirectionPolicy,
    EffectivePolicy,
    HostEffectivePolicy,
    HostEndpoint,
    Policy,
    PolicyKey,
    TierInfo,
    TierPolicies,
    WorkloadEndpoint,
)

__all__ = ["effective_policy", "host_effective_policy", "workload_effective_policy"]


def _direction(
    tiers: Sequence[TierInfo],
    inbound: bool,
    profile_ids: Sequence[str],
    active_policy: Callable[[PolicyKey], bool],
    active_profile: Callable[[str], bool],
) -> DirectionPolicy:
    resolved = []
    for tier in tiers:
        # Staged policies are never enforced, and a tier of staged policies
        # alone has no end-of-tier drop (Felix's rules/endpoints.go): both
        # follow from leaving them out here.
        keys = tuple(
            k
            for k in (tier.ingress_policies if inbound else tier.egress_policies)
            if not k.staged and active_policy(k)
        )
        if keys:
            resolved.append(TierPolicies(tier.name, keys, tier.default_action))
    return DirectionPolicy(
        tuple(resolved), tuple(name for name in profile_ids if active_profile(name))
    )


def effective_policy(
    tiers: Sequence[TierInfo],
    profile_ids: Sequence[str],
    active_policy: Callable[[PolicyKey], bool],
    active_profile: Callable[[str], bool],
) -> EffectivePolicy:
    """Tiers with their active policies per direction, then active profiles."""
    return EffectivePolicy(
        _direction(tiers, True, profile_ids, active_policy, active_profile),
        _direction(tiers, False, profile_ids, active_policy, active_profile),
    )


def workload_effective_policy(
    endpoint: WorkloadEndpoint,
    active_policy: Callable[[PolicyKey], bool],
    active_profile: Callable[[str], bool],
) -> EffectivePolicy:
    return effective_policy(endpoint.tiers, endpoint.profile_ids, active_policy, active_profile)


def host_effective_policy(
    endpoint: HostEndpoint,
    policy_of: Callable[[PolicyKey], Policy | None],
    active_profile: Callable[[str], bool],
) -> HostEffectivePolicy:
    """Untracked and pre-DNAT tiers count only policies marked so (Felix's rule)."""

    def policy_only(tiers: Sequence[TierInfo], wanted: Callable[[Policy], bool]) -> EffectivePolicy:
        def active(key: PolicyKey) -> bool:
            policy = policy_of(key)
            return policy is not None and wanted(policy)

        return effective_policy(tiers, (), active, active_profile)

    def active(key: PolicyKey) -> bool:
        return policy_of(key) is not None

    return HostEffectivePolicy(
        effective_policy(endpoint.tiers, endpoint.profile_ids, active, active_profile),
        policy_only(endpoint.untracked_tiers, lambda p: p.untracked),
        policy_only(endpoint.pre_dnat_tiers, lambda p: p.pre_dnat),
        policy_only(endpoint.forward_tiers, lambda p: True),
    )
