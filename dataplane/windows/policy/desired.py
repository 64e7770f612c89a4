"""What the managers handed the Windows platform, and which endpoints it changed.

Desired state is kept until removed, so a failed apply loses nothing. Each
change marks the workload endpoints whose ACLs it can alter -- the endpoint
itself, or every user of a changed policy, profile or IP set, found through
the managers' reverse index -- and an apply re-renders only those.
"""

from __future__ import annotations

from dataplane.core.platform import EndpointKey, NoPolicyUsers, PolicyUsers
from dataplane.errors import ProgrammingError
from dataplane.model import (
    EffectivePolicy,
    IPSet,
    Policy,
    PolicyKey,
    Profile,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)

__all__ = ["Desired"]


class Desired:
    def __init__(self) -> None:
        self.users: PolicyUsers = NoPolicyUsers()
        self.policies: dict[PolicyKey, Policy] = {}
        self.profiles: dict[str, Profile] = {}
        self.sets: dict[str, IPSet] = {}
        self.endpoints: dict[WorkloadEndpointKey, WorkloadEndpoint] = {}
        self.effective: dict[WorkloadEndpointKey, EffectivePolicy] = {}
        # Members as they change; frozen into ``sets`` at the next apply.
        self._members: dict[str, set[str]] = {}
        self.changed_sets: set[str] = set()
        self._dirty: set[WorkloadEndpointKey] = set()
        self._changed_policies: set[PolicyKey] = set()
        self._changed_profiles: set[str] = set()

    # --- sets -----------------------------------------------------------------

    def replace_ipset(self, ipset: IPSet) -> None:
        self.sets[ipset.id] = ipset
        self._members[ipset.id] = set(ipset.members)
        self.changed_sets.add(ipset.id)

    def update_ipset_members(
        self, set_id: str, added: frozenset[str], removed: frozenset[str]
    ) -> None:
        members = self._members.get(set_id)
        if members is None:
            raise ProgrammingError(f"IP set {set_id}: member update for a set never created")
        members -= removed
        members |= added
        self.changed_sets.add(set_id)

    def remove_ipset(self, set_id: str) -> None:
        self.sets.pop(set_id, None)
        self._members.pop(set_id, None)
        self.changed_sets.add(set_id)

    # --- rules and endpoints --------------------------------------------------------

    def set_policy(self, key: PolicyKey, policy: Policy | None) -> None:
        if policy is None:
            self.policies.pop(key, None)
        else:
            self.policies[key] = policy
        self._changed_policies.add(key)

    def set_profile(self, profile_id: str, profile: Profile | None) -> None:
        if profile is None:
            self.profiles.pop(profile_id, None)
        else:
            self.profiles[profile_id] = profile
        self._changed_profiles.add(profile_id)

    def set_endpoint(self, endpoint: WorkloadEndpoint, policy: EffectivePolicy) -> None:
        self.endpoints[endpoint.key] = endpoint
        self.effective[endpoint.key] = policy
        self._dirty.add(endpoint.key)

    def remove_endpoint(self, key: WorkloadEndpointKey) -> None:
        self.endpoints.pop(key, None)
        self.effective.pop(key, None)
        self._dirty.discard(key)

    def touch_all(self) -> None:
        """Every endpoint to be re-rendered (configuration changed, first apply)."""
        self._dirty |= set(self.endpoints)

    def take_changes(self) -> tuple[set[WorkloadEndpointKey], set[str]]:
        """(endpoints to re-render, sets that changed) since the last call; sets frozen."""
        for set_id in self.changed_sets:
            if set_id in self.sets:
                old = self.sets[set_id]
                self.sets[set_id] = IPSet(set_id, old.type, frozenset(self._members[set_id]))
        dirty: set[EndpointKey] = set(self._dirty)
        for key in self._changed_policies:
            dirty |= self.users.endpoints_using_policy(key)
        for name in self._changed_profiles:
            dirty |= self.users.endpoints_using_profile(name)
        if self.changed_sets:
            dirty |= self.users.endpoints_using_sets(self.changed_sets)
        changed_sets = set(self.changed_sets)
        self._dirty.clear()
        self._changed_policies.clear()
        self._changed_profiles.clear()
        self.changed_sets.clear()
        workloads = {k for k in dirty if isinstance(k, WorkloadEndpointKey)}
        return {k for k in workloads if k in self.endpoints}, changed_sets
