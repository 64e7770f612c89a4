"""PolicyWriter: one filter chain per policy and profile, per direction.

Endpoint chains only jump to these, so a change to a policy's rules
rewrites its two chains and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from dataplane.linux.writers.target import R, Target
from dataplane.model import Policy, PolicyKey, Profile

__all__ = ["PolicyWriter"]


class PolicyWriter:
    def __init__(self) -> None:
        self._policies: dict[PolicyKey, Policy] = {}
        self._profiles: dict[str, Profile] = {}
        self._dirty_policies: set[PolicyKey] = set()
        self._dirty_profiles: set[str] = set()

    @property
    def policies(self) -> Mapping[PolicyKey, Policy]:
        return MappingProxyType(self._policies)

    @property
    def profiles(self) -> Mapping[str, Profile]:
        return MappingProxyType(self._profiles)

    def set_policy(self, key: PolicyKey, policy: Policy) -> None:
        self._policies[key] = policy
        self._dirty_policies.add(key)

    def remove_policy(self, key: PolicyKey) -> None:
        if self._policies.pop(key, None) is not None:
            self._dirty_policies.add(key)

    def set_profile(self, name: str, profile: Profile) -> None:
        self._profiles[name] = profile
        self._dirty_profiles.add(name)

    def remove_profile(self, name: str) -> None:
        if self._profiles.pop(name, None) is not None:
            self._dirty_profiles.add(name)

    def write(self, target: Target[R], everything: bool) -> None:
        policies = (
            set(self._policies) | self._dirty_policies if everything else self._dirty_policies
        )
        profiles = (
            set(self._profiles) | self._dirty_profiles if everything else self._dirty_profiles
        )
        names = target.names
        for version in target.versions:
            table = target.table("filter", version)
            render = target.renderer("filter", version)
            for key in policies:
                policy = self._policies.get(key)
                if policy is None:
                    table.remove_chain(names.policy(key, True))
                    table.remove_chain(names.policy(key, False))
                else:
                    for chain in render.policy_chains(key, policy):
                        table.update_chain(chain)
            for name in profiles:
                profile = self._profiles.get(name)
                if profile is None:
                    table.remove_chain(names.profile(name, True))
                    table.remove_chain(names.profile(name, False))
                else:
                    for chain in render.profile_chains(name, profile):
                        table.update_chain(chain)
        self._dirty_policies.clear()
        self._dirty_profiles.clear()
