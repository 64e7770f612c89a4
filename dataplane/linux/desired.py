"""DesiredState: what the Linux platform has been asked for, and what changed.

The sink half of :class:`~dataplane.linux.platform.LinuxPlatform`: managers
hand model values in; this records them and marks exactly what must be
re-rendered (a policy's chains, an endpoint's chains, the dispatch tree, a
service, everything), so an apply renders only what changed. No I/O.
"""

from __future__ import annotations

import logging
from typing import Any

from dataplane.model import (
    HostEndpoint,
    HostEndpointKey,
    IPPool,
    IPSet,
    IPSetType,
    Policy,
    PolicyKey,
    Profile,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)
from dataplane.service_model import Service, ServiceKey

__all__ = ["DesiredState"]

log = logging.getLogger(__name__)


class DesiredState:
    def __init__(self) -> None:
        self.policies: dict[PolicyKey, Policy] = {}
        self.profiles: dict[str, Profile] = {}
        self.workloads: dict[WorkloadEndpointKey, WorkloadEndpoint] = {}
        self.hosts: dict[HostEndpointKey, HostEndpoint] = {}
        self.pools: dict[str, IPPool] = {}
        self.services: dict[ServiceKey, Service] = {}
        self._ipset_types: dict[str, IPSetType] = {}
        # What changed since the last render.
        self._dirty_policies: set[PolicyKey] = set()
        self._dirty_profiles: set[str] = set()
        self._dirty_workloads: set[WorkloadEndpointKey] = set()
        self._dirty_services: set[ServiceKey] = set()
        self._removed_ifaces: set[str] = set()
        self._dispatch_dirty = True
        self._rerender_all = True
        self._pools_dirty = True

    def _ipset_op(self, op: str, arg: Any) -> None:
        """Forward an IP set change to the programmer (the platform's part)."""
        raise NotImplementedError

    def replace_ipset(self, ipset: IPSet) -> None:
        if self._ipset_types.get(ipset.id) != ipset.type:
            # Was an empty set until now, or of another type: either way the
            # rules name another kernel set.
            self._rerender_rules_referencing(ipset.id)
        self._ipset_types[ipset.id] = ipset.type
        self._ipset_op("replace", ipset)

    def update_ipset_members(
        self, set_id: str, added: frozenset[str], removed: frozenset[str]
    ) -> None:
        self._ipset_op("update", (set_id, added, removed))

    def remove_ipset(self, set_id: str) -> None:
        self._ipset_types.pop(set_id, None)
        self._ipset_op("remove", set_id)
        self._rerender_rules_referencing(set_id)

    def _rerender_rules_referencing(self, set_id: str) -> None:
        # A rule on a missing set renders differently (it is an empty set).
        for key, policy in self.policies.items():
            if set_id in policy.ip_set_ids():
                self._dirty_policies.add(key)
        for name, profile in self.profiles.items():
            if set_id in profile.ip_set_ids():
                self._dirty_profiles.add(name)

    def set_policy(self, key: PolicyKey, policy: Policy) -> None:
        known = key in self.policies
        self.policies[key] = policy
        self._dirty_policies.add(key)
        if not known:
            self._rerender_all = True  # endpoint chains may now jump to it

    def remove_policy(self, key: PolicyKey) -> None:
        if self.policies.pop(key, None) is not None:
            self._dirty_policies.add(key)
            self._rerender_all = True

    def set_profile(self, profile_id: str, profile: Profile) -> None:
        known = profile_id in self.profiles
        self.profiles[profile_id] = profile
        self._dirty_profiles.add(profile_id)
        if not known:
            self._rerender_all = True

    def remove_profile(self, profile_id: str) -> None:
        if self.profiles.pop(profile_id, None) is not None:
            self._dirty_profiles.add(profile_id)
            self._rerender_all = True

    def set_workload_endpoint(self, endpoint: WorkloadEndpoint) -> None:
        old = self.workloads.get(endpoint.key)
        self.workloads[endpoint.key] = endpoint
        self._dirty_workloads.add(endpoint.key)
        if old is None or old.name != endpoint.name:
            self._dispatch_dirty = True  # the set of interfaces changed
        if old is not None and old.name != endpoint.name:
            self._removed_ifaces.add(old.name)

    def remove_workload_endpoint(self, key: WorkloadEndpointKey) -> None:
        old = self.workloads.pop(key, None)
        if old is not None:
            self._removed_ifaces.add(old.name)
            self._dispatch_dirty = True

    def set_host_endpoint(self, endpoint: HostEndpoint) -> None:
        if not endpoint.name:
            log.warning(
                "host endpoint %s has no interface name; all-interfaces host endpoints"
                " are not supported yet and it is ignored",
                endpoint.key,
            )
            return
        self.hosts[endpoint.key] = endpoint
        self._rerender_all = True

    def remove_host_endpoint(self, key: HostEndpointKey) -> None:
        if self.hosts.pop(key, None) is not None:
            self._rerender_all = True

    def set_ip_pool(self, pool_id: str, pool: IPPool) -> None:
        self.pools[pool_id] = pool
        self._pools_dirty = True

    def remove_ip_pool(self, pool_id: str) -> None:
        if self.pools.pop(pool_id, None) is not None:
            self._pools_dirty = True

    def set_service(self, service: Service) -> None:
        self.services[service.key] = service
        self._dirty_services.add(service.key)

    def remove_service(self, key: ServiceKey) -> None:
        self.services.pop(key, None)
        self._dirty_services.add(key)
