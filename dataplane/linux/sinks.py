"""The Linux platform's sink side: each value the managers hand over, to the
writers that keep it (:class:`~dataplane.linux.desired.Desired`).

No I/O: values are kept until the next apply writes them. IP set changes
before the first apply (when the set programmer does not exist yet) wait
in :class:`~dataplane.linux.pending_sets.PendingIPSets`.
"""

from __future__ import annotations

from dataplane.core.platform import PolicyUsers
from dataplane.linux.desired import Desired
from dataplane.linux.pending_sets import PendingIPSets
from dataplane.linux.programmers import Programmers
from dataplane.linux.statuses import EndpointStatuses
from dataplane.linux.writers.shapes import SetProgrammer
from dataplane.model import (
    EffectivePolicy,
    HostEffectivePolicy,
    HostEndpoint,
    HostEndpointKey,
    IPPool,
    IPSet,
    Policy,
    PolicyKey,
    Profile,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)
from dataplane.model.hosts import Encapsulation, Host
from dataplane.model.routes import Route, Vtep
from dataplane.model.services import Service, ServiceKey

__all__ = ["Sinks"]


class Sinks:
    """The sink methods of :class:`~dataplane.linux.platform.LinuxPlatform`,
    over the state it sets up."""

    _desired: Desired
    _statuses: EndpointStatuses
    _ipset_changes: PendingIPSets
    _kernel: Programmers | None
    _users: PolicyUsers

    def bind_policy_users(self, users: PolicyUsers) -> None:
        self._users = users

    def _ipsets(self) -> SetProgrammer | None:
        return self._kernel.ipsets if self._kernel else None

    def replace_ipset(self, ipset: IPSet) -> None:
        self._ipset_changes.replace(ipset, self._ipsets())

    def update_ipset_members(
        self, set_id: str, added: frozenset[str], removed: frozenset[str]
    ) -> None:
        self._ipset_changes.update(set_id, added, removed, self._ipsets())

    def remove_ipset(self, set_id: str) -> None:
        self._ipset_changes.remove(set_id, self._ipsets())

    def set_policy(self, key: PolicyKey, policy: Policy) -> None:
        self._desired.policies.set_policy(key, policy)
        self._desired.hosts.policy_changed(key, policy)

    def remove_policy(self, key: PolicyKey) -> None:
        self._desired.policies.remove_policy(key)
        self._desired.hosts.policy_changed(key, None)

    def set_profile(self, profile_id: str, profile: Profile) -> None:
        self._desired.policies.set_profile(profile_id, profile)

    def remove_profile(self, profile_id: str) -> None:
        self._desired.policies.remove_profile(profile_id)

    def set_workload_endpoint(self, endpoint: WorkloadEndpoint, policy: EffectivePolicy) -> None:
        self._desired.workloads.set(endpoint, policy)
        self._desired.nat.set_floating_ips(endpoint.key, endpoint.ipv4_nat + endpoint.ipv6_nat)
        self._desired.routes.set(endpoint)
        self._desired.dscp.set_workload(endpoint)
        self._statuses.touch(endpoint.key)

    def remove_workload_endpoint(self, key: WorkloadEndpointKey) -> None:
        self._desired.workloads.remove(key)
        self._desired.dscp.remove(key)
        self._desired.nat.remove_endpoint(key)
        self._desired.routes.remove(key)
        self._statuses.touch(key)

    def set_host_endpoint(self, endpoint: HostEndpoint, policy: HostEffectivePolicy) -> None:
        self._desired.hosts.set(endpoint, policy)
        self._desired.dscp.set_host(endpoint)
        self._statuses.touch(endpoint.key)

    def remove_host_endpoint(self, key: HostEndpointKey) -> None:
        self._desired.hosts.remove(key)
        self._desired.dscp.remove(key)
        self._statuses.touch(key)

    def set_ip_pool(self, pool_id: str, pool: IPPool) -> None:
        self._desired.nat.set_pool(pool_id, pool)

    def remove_ip_pool(self, pool_id: str) -> None:
        self._desired.nat.remove_pool(pool_id)

    def set_vtep(self, vtep: Vtep) -> None:
        self._desired.overlay.set_vtep(vtep)

    def remove_vtep(self, node: str) -> None:
        self._desired.overlay.remove_vtep(node)

    def set_route(self, route: Route) -> None:
        self._desired.overlay.set_route(route)

    def remove_route(self, dst: str) -> None:
        self._desired.overlay.remove_route(dst)

    def set_host(self, host: Host) -> None:
        self._desired.overlay.set_host(host)

    def remove_host(self, name: str) -> None:
        self._desired.overlay.remove_host(name)

    def set_encapsulation(self, encapsulation: Encapsulation) -> None:
        self._desired.set_encapsulation(encapsulation)

    def set_service(self, service: Service) -> None:
        self._desired.services.set(service)

    def remove_service(self, key: ServiceKey) -> None:
        self._desired.services.remove(key)
