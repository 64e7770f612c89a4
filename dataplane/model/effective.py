"""Effective policy: what the managers resolve for each endpoint."""

from __future__ import annotations

from dataclasses import dataclass

from dataplane.model.policy import Action, PolicyKey

__all__ = ["DirectionPolicy", "EffectivePolicy", "HostEffectivePolicy", "TierPolicies"]


@dataclass(frozen=True, slots=True)
class TierPolicies:
    """One tier as it decides one endpoint's traffic in one direction.

    Resolved by the managers: only the tier's policies for that direction
    that are active now, in order (a tier with none is left out).
    """

    name: str
    policies: tuple[PolicyKey, ...]
    default_action: Action = Action.DENY


@dataclass(frozen=True, slots=True)
class DirectionPolicy:
    """Tiers, then the endpoint's active profiles, for one direction."""

    tiers: tuple[TierPolicies, ...] = ()
    profiles: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EffectivePolicy:
    """An endpoint's effective ordered policy: what a platform enforces.

    Computed by the managers from the endpoint's tiers and profile ids and
    the policies and profiles active now; a platform renders it and never
    re-derives it.
    """

    ingress: DirectionPolicy = DirectionPolicy()
    egress: DirectionPolicy = DirectionPolicy()

    def direction(self, inbound: bool) -> DirectionPolicy:
        return self.ingress if inbound else self.egress


@dataclass(frozen=True, slots=True)
class HostEffectivePolicy:
    """A host endpoint's policy at each of its four enforcement points.

    ``normal`` has profiles; untracked, pre-DNAT and forward policy never
    do (Felix applies only policy there).
    """

    normal: EffectivePolicy = EffectivePolicy()
    untracked: EffectivePolicy = EffectivePolicy()
    pre_dnat: EffectivePolicy = EffectivePolicy()
    forward: EffectivePolicy = EffectivePolicy()
