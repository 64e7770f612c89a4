"""PolicyIndex: active policy state, its reverse indexes, and what changed.

The policy and endpoint managers record converted values here; at each
apply they hand the platform only what changed:

* a policy or profile whose rules must be (re)written -- its content
  changed, or an IP set it references was created, removed or changed type
  (a rule on a set renders differently on every platform then);
* an endpoint whose value or *effective policy* changed -- the latter when a
  policy or profile it names became active or inactive.

The reverse indexes (policy -> endpoints, profile -> endpoints, IP set ->
policies and profiles -> endpoints; named-port sets are IP sets like any
other) make each of those a lookup, and a platform asks them instead of
re-deriving: which endpoints a refused policy chain decides, which endpoints
a quarantined set affects, which endpoints' ACLs a set's members feed.

No I/O; the platform sees only model values.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import TypeVar

from dataplane.core.platform import EndpointKey, EndpointsSink, RulesSink
from dataplane.managers.resolve import host_effective_policy, workload_effective_policy
from dataplane.model import (
    EffectivePolicy,
    HostEffectivePolicy,
    HostEndpoint,
    HostEndpointKey,
    Policy,
    PolicyKey,
    Profile,
    TierInfo,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)

__all__ = ["PolicyIndex"]

_Endpoint = WorkloadEndpoint | HostEndpoint
_K = TypeVar("_K")
_V = TypeVar("_V")


def _all_tiers(endpoint: _Endpoint) -> tuple[TierInfo, ...]:
    if isinstance(endpoint, HostEndpoint):
        return (
            endpoint.tiers
            + endpoint.untracked_tiers
            + endpoint.pre_dnat_tiers
            + endpoint.forward_tiers
        )
    return endpoint.tiers


def _policy_keys(endpoint: _Endpoint) -> set[PolicyKey]:
    return {
        key for tier in _all_tiers(endpoint) for key in tier.ingress_policies + tier.egress_policies
    }


def _unlink(index: dict[_K, set[_V]], key: _K, value: _V) -> None:
    """Take ``value`` out of ``index[key]``, and the key too once nothing is left.

    Policy names, profile names and set ids come and go by the thousand on
    a busy node; an emptied entry kept would outlive them for good.
    """
    values = index.get(key)
    if values is not None:
        values.discard(value)
        if not values:
            del index[key]


def _stage_flags(policy: Policy | None) -> tuple[bool, bool] | None:
    """What of a policy decides where it applies (see ``resolve``)."""
    return None if policy is None else (policy.untracked, policy.pre_dnat)


class PolicyIndex:
    def __init__(self) -> None:
        self._policies: dict[PolicyKey, Policy] = {}
        self._profiles: dict[str, Profile] = {}
        self._endpoints: dict[EndpointKey, _Endpoint] = {}
        # Reverse indexes.
        self._policy_users: defaultdict[PolicyKey, set[EndpointKey]] = defaultdict(set)
        self._profile_users: defaultdict[str, set[EndpointKey]] = defaultdict(set)
        self._set_policies: defaultdict[str, set[PolicyKey]] = defaultdict(set)
        self._set_profiles: defaultdict[str, set[str]] = defaultdict(set)
        # Since the last flush: the value each changed key had before it
        # (to send nothing when a batch ends where it began), what must be
        # sent again regardless, and the endpoints to re-resolve.
        self._policies_before: dict[PolicyKey, Policy | None] = {}
        self._profiles_before: dict[str, Profile | None] = {}
        self._rewrite_policies: set[PolicyKey] = set()
        self._rewrite_profiles: set[str] = set()
        self._dirty_endpoints: set[EndpointKey] = set()
        # What the platform holds now, to send it only real changes.
        self._sent: dict[EndpointKey, tuple[_Endpoint, EffectivePolicy | HostEffectivePolicy]] = {}

    # --- recording (phase 1) ----------------------------------------------------

    def set_policy(self, key: PolicyKey, policy: Policy | None) -> None:
        old = self._policies.get(key)
        self._policies_before.setdefault(key, old)
        old_sets = old.ip_set_ids() if old is not None else frozenset()
        new_sets = policy.ip_set_ids() if policy is not None else frozenset()
        for set_id in old_sets - new_sets:
            _unlink(self._set_policies, set_id, key)
        for set_id in new_sets - old_sets:
            self._set_policies[set_id].add(key)
        if policy is None:
            self._policies.pop(key, None)
        else:
            self._policies[key] = policy
        if _stage_flags(old) != _stage_flags(policy):
            # Became active or inactive, or moved to or from untracked or
            # pre-DNAT: the endpoints naming it resolve anew.
            self._dirty_endpoints |= self._policy_users.get(key, set())

    def set_profile(self, name: str, profile: Profile | None) -> None:
        old = self._profiles.get(name)
        self._profiles_before.setdefault(name, old)
        old_sets = old.ip_set_ids() if old is not None else frozenset()
        new_sets = profile.ip_set_ids() if profile is not None else frozenset()
        for set_id in old_sets - new_sets:
            _unlink(self._set_profiles, set_id, name)
        for set_id in new_sets - old_sets:
            self._set_profiles[set_id].add(name)
        if profile is None:
            self._profiles.pop(name, None)
        else:
            self._profiles[name] = profile
        if (old is None) != (profile is None):
            self._dirty_endpoints |= self._profile_users.get(name, set())

    def set_endpoint(self, key: EndpointKey, endpoint: _Endpoint | None) -> None:
        old = self._endpoints.get(key)
        # Only what changed moves in the reverse indexes (most updates keep
        # their policies and profiles).
        old_policies = _policy_keys(old) if old is not None else set()
        new_policies = _policy_keys(endpoint) if endpoint is not None else set()
        for pkey in old_policies - new_policies:
            _unlink(self._policy_users, pkey, key)
        for pkey in new_policies - old_policies:
            self._policy_users[pkey].add(key)
        old_profiles = set(old.profile_ids) if old is not None else set()
        new_profiles = set(endpoint.profile_ids) if endpoint is not None else set()
        for name in old_profiles - new_profiles:
            _unlink(self._profile_users, name, key)
        for name in new_profiles - old_profiles:
            self._profile_users[name].add(key)
        if endpoint is None:
            self._endpoints.pop(key, None)
        else:
            self._endpoints[key] = endpoint
        self._dirty_endpoints.add(key)

    def ip_set_changed_shape(self, set_id: str) -> None:
        """A set was created, removed or changed type: rules on it change."""
        self._rewrite_policies |= self._set_policies.get(set_id, set())
        self._rewrite_profiles |= self._set_profiles.get(set_id, set())

    # --- queries ------------------------------------------------------------------

    def endpoints_using_policy(self, key: PolicyKey) -> frozenset[EndpointKey]:
        return frozenset(self._policy_users.get(key, ()))

    def endpoints_using_profile(self, name: str) -> frozenset[EndpointKey]:
        return frozenset(self._profile_users.get(name, ()))

    def endpoints_using_sets(self, set_ids: Iterable[str]) -> frozenset[EndpointKey]:
        """Endpoints whose active policies or profiles reference any of ``set_ids``."""
        out: set[EndpointKey] = set()
        for set_id in set_ids:
            for pkey in self._set_policies.get(set_id, ()):
                out |= self._policy_users.get(pkey, set())
            for name in self._set_profiles.get(set_id, ()):
                out |= self._profile_users.get(name, set())
        return frozenset(out)

    def effective(self, key: EndpointKey) -> EffectivePolicy | HostEffectivePolicy | None:
        endpoint = self._endpoints.get(key)
        if endpoint is None:
            return None
        active_policy = self._policies.__contains__
        active_profile = self._profiles.__contains__
        if isinstance(endpoint, HostEndpoint):
            return host_effective_policy(endpoint, self._policies.get, active_profile)
        return workload_effective_policy(endpoint, active_policy, active_profile)

    # --- flushing (phase 2) ---------------------------------------------------------

    def flush_rules(self, sink: RulesSink) -> None:
        """Policies and profiles whose rules changed, in a stable order."""
        for key in sorted(set(self._policies_before) | self._rewrite_policies):
            policy = self._policies.get(key)
            before = self._policies_before.get(key, policy)
            if policy is None:
                if before is not None:
                    sink.remove_policy(key)
            elif policy != before or key in self._rewrite_policies:
                sink.set_policy(key, policy)
        for name in sorted(set(self._profiles_before) | self._rewrite_profiles):
            profile = self._profiles.get(name)
            previous = self._profiles_before.get(name, profile)
            if profile is None:
                if previous is not None:
                    sink.remove_profile(name)
            elif profile != previous or name in self._rewrite_profiles:
                sink.set_profile(name, profile)
        self._policies_before.clear()
        self._profiles_before.clear()
        self._rewrite_policies.clear()
        self._rewrite_profiles.clear()

    def flush_endpoints(self, sink: EndpointsSink) -> None:
        """Endpoints whose value or effective policy changed."""
        for key in sorted(self._dirty_endpoints, key=str):
            endpoint = self._endpoints.get(key)
            effective = self.effective(key)
            if endpoint is None or effective is None:
                if self._sent.pop(key, None) is not None:
                    if isinstance(key, HostEndpointKey):
                        sink.remove_host_endpoint(key)
                    else:
                        sink.remove_workload_endpoint(key)
                continue
            if self._sent.get(key) == (endpoint, effective):
                continue
            self._sent[key] = (endpoint, effective)
            if isinstance(endpoint, HostEndpoint):
                assert isinstance(effective, HostEffectivePolicy)
                sink.set_host_endpoint(endpoint, effective)
            else:
                assert isinstance(effective, EffectivePolicy)
                assert isinstance(key, WorkloadEndpointKey)
                sink.set_workload_endpoint(endpoint, effective)
        self._dirty_endpoints.clear()
