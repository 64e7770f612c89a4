"""SimPlatform: the dataplane kept in memory, for replay, tests and demos.

It implements the full :class:`~dataplane.core.platform.Platform` interface with
the same semantics a kernel platform has: desired state accumulates between
applies, ``apply`` makes the *programmed* state equal to the desired state
in one step, and a failed apply changes nothing programmed and loses
nothing desired. It counts applies (the loop's batching is measured through
it) and has fault switches so tests can make applies fail, or make it
refuse single objects as a kernel quarantines them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import trio

from dataplane.config import Config
from dataplane.core.platform import EndpointKey, ObjectError, PolicyUsers
from dataplane.errors import ProgrammingError
from dataplane.model import (
    EffectivePolicy,
    EndpointStatus,
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
from dataplane.sim.dump import dump_state

__all__ = ["SimPlatform", "SimState"]


@dataclass(slots=True)
class SimState:
    """One complete dataplane state (desired or programmed)."""

    ipsets: dict[str, IPSet] = field(default_factory=dict)
    policies: dict[PolicyKey, Policy] = field(default_factory=dict)
    profiles: dict[str, Profile] = field(default_factory=dict)
    workload_endpoints: dict[WorkloadEndpointKey, WorkloadEndpoint] = field(default_factory=dict)
    host_endpoints: dict[HostEndpointKey, HostEndpoint] = field(default_factory=dict)
    ip_pools: dict[str, IPPool] = field(default_factory=dict)
    services: dict[ServiceKey, Service] = field(default_factory=dict)
    vteps: dict[str, Vtep] = field(default_factory=dict)
    routes: dict[str, Route] = field(default_factory=dict)
    hosts: dict[str, Host] = field(default_factory=dict)
    encapsulation: Encapsulation = field(default_factory=Encapsulation)
    # Each endpoint's effective policy, as the managers resolved it.
    effective: dict[EndpointKey, EffectivePolicy | HostEffectivePolicy] = field(
        default_factory=dict
    )

    def copy(self) -> SimState:
        # Values are frozen, so shallow copies of the maps are snapshots.
        return SimState(
            dict(self.ipsets),
            dict(self.policies),
            dict(self.profiles),
            dict(self.workload_endpoints),
            dict(self.host_endpoints),
            dict(self.ip_pools),
            dict(self.services),
            dict(self.vteps),
            dict(self.routes),
            dict(self.hosts),
            self.encapsulation,
            dict(self.effective),
        )


class SimPlatform:
    """In-memory platform.

    Attributes:
        apply_count: applies attempted (successful or not).
        fail_applies: fault switch; while positive, each apply raises
            :class:`ProgrammingError` and decrements it.
        refuse_objects: fault switch; objects, by (kind, id) as
            :class:`~dataplane.core.platform.ObjectError` names them, that
            every apply refuses with the given reason: they are kept out of
            ``programmed`` and reported by :meth:`object_errors` while
            desired, and the apply succeeds.
    """

    name = "sim"

    def __init__(self) -> None:
        self.desired = SimState()
        self.programmed = SimState()
        self.config = Config()
        self.apply_count = 0
        self.successful_applies = 0
        self.fail_applies = 0
        self.refuse_objects: dict[tuple[str, str], str] = {}
        self._refused: list[ObjectError] = []
        # Members of desired sets, mutable so deltas stay O(delta) until
        # apply freezes them.
        self._members: dict[str, set[str]] = {}
        self._dirty_sets: set[str] = set()
        self.policy_users: PolicyUsers | None = None

    def bind_policy_users(self, users: PolicyUsers) -> None:
        self.policy_users = users

    # --- IPSetsSink ---------------------------------------------------------

    def replace_ipset(self, ipset: IPSet) -> None:
        self.desired.ipsets[ipset.id] = ipset
        self._members[ipset.id] = set(ipset.members)
        self._dirty_sets.discard(ipset.id)

    def update_ipset_members(
        self, set_id: str, added: frozenset[str], removed: frozenset[str]
    ) -> None:
        if set_id not in self.desired.ipsets:
            raise ProgrammingError(f"IP set {set_id}: member update for a set never created")
        members = self._members[set_id]
        members -= removed
        members |= added
        self._dirty_sets.add(set_id)

    def remove_ipset(self, set_id: str) -> None:
        self.desired.ipsets.pop(set_id, None)
        self._members.pop(set_id, None)
        self._dirty_sets.discard(set_id)

    # --- RulesSink ----------------------------------------------------------

    def set_policy(self, key: PolicyKey, policy: Policy) -> None:
        self.desired.policies[key] = policy

    def remove_policy(self, key: PolicyKey) -> None:
        self.desired.policies.pop(key, None)

    def set_profile(self, profile_id: str, profile: Profile) -> None:
        self.desired.profiles[profile_id] = profile

    def remove_profile(self, profile_id: str) -> None:
        self.desired.profiles.pop(profile_id, None)

    # --- EndpointsSink ------------------------------------------------------

    def set_workload_endpoint(self, endpoint: WorkloadEndpoint, policy: EffectivePolicy) -> None:
        self.desired.workload_endpoints[endpoint.key] = endpoint
        self.desired.effective[endpoint.key] = policy

    def remove_workload_endpoint(self, key: WorkloadEndpointKey) -> None:
        self.desired.workload_endpoints.pop(key, None)
        self.desired.effective.pop(key, None)

    def set_host_endpoint(self, endpoint: HostEndpoint, policy: HostEffectivePolicy) -> None:
        self.desired.host_endpoints[endpoint.key] = endpoint
        self.desired.effective[endpoint.key] = policy

    def remove_host_endpoint(self, key: HostEndpointKey) -> None:
        self.desired.host_endpoints.pop(key, None)
        self.desired.effective.pop(key, None)

    # --- PoolsSink ----------------------------------------------------------

    def set_ip_pool(self, pool_id: str, pool: IPPool) -> None:
        self.desired.ip_pools[pool_id] = pool

    def remove_ip_pool(self, pool_id: str) -> None:
        self.desired.ip_pools.pop(pool_id, None)

    # --- RoutesSink ---------------------------------------------------------

    def set_vtep(self, vtep: Vtep) -> None:
        self.desired.vteps[vtep.node] = vtep

    def remove_vtep(self, node: str) -> None:
        self.desired.vteps.pop(node, None)

    def set_route(self, route: Route) -> None:
        self.desired.routes[route.dst] = route

    def remove_route(self, dst: str) -> None:
        self.desired.routes.pop(dst, None)

    def set_host(self, host: Host) -> None:
        self.desired.hosts[host.name] = host

    def remove_host(self, name: str) -> None:
        self.desired.hosts.pop(name, None)

    def set_encapsulation(self, encapsulation: Encapsulation) -> None:
        self.desired.encapsulation = encapsulation

    # --- ServicesSink -------------------------------------------------------

    def set_service(self, service: Service) -> None:
        self.desired.services[service.key] = service

    def remove_service(self, key: ServiceKey) -> None:
        self.desired.services.pop(key, None)

    # --- Platform -----------------------------------------------------------

    async def serve(self) -> None:
        return  # nothing runs in the background in memory

    def wants_apply_at(self) -> float:
        return math.inf  # memory does not drift

    def configure(self, config: Config) -> None:
        self.config = config

    async def apply(self) -> None:
        await trio.lowlevel.checkpoint()
        self.apply_count += 1
        if self.fail_applies > 0:
            self.fail_applies -= 1
            raise ProgrammingError("sim: injected apply failure")
        for set_id in self._dirty_sets:
            old = self.desired.ipsets[set_id]
            self.desired.ipsets[set_id] = IPSet(set_id, old.type, frozenset(self._members[set_id]))
        self._dirty_sets.clear()
        self.programmed = self.desired.copy()
        self._refused = _hold_back(self.programmed, self.refuse_objects)
        self.successful_applies += 1

    def object_errors(self) -> list[ObjectError]:
        """The objects the last apply refused (see ``refuse_objects``), sorted."""
        return list(self._refused)

    def endpoint_statuses(self) -> Mapping[EndpointKey, EndpointStatus]:
        # No links to watch: a workload is up exactly when it is admin-up.
        out: dict[EndpointKey, EndpointStatus] = {
            key: EndpointStatus.UP if wep.admin_up else EndpointStatus.DOWN
            for key, wep in self.programmed.workload_endpoints.items()
        }
        out.update({key: EndpointStatus.UP for key in self.programmed.host_endpoints})
        return out

    def dump(self) -> str:
        return dump_state(self.programmed)


def _hold_back(state: SimState, refuse: Mapping[tuple[str, str], str]) -> list[ObjectError]:
    """Remove the refused objects ``state`` holds from it; what was removed."""
    if not refuse:
        return []
    stores: dict[str, dict[Any, Any]] = {
        "ipset": state.ipsets,
        "policy": state.policies,
        "profile": state.profiles,
        "workload_endpoint": state.workload_endpoints,
        "host_endpoint": state.host_endpoints,
        "ip_pool": state.ip_pools,
        "service": state.services,
        "vtep": state.vteps,
        "route": state.routes,
        "host": state.hosts,
    }
    refused = []
    for kind, store in stores.items():
        for key in [k for k in store if (kind, str(k)) in refuse]:
            del store[key]
            state.effective.pop(key, None)
            refused.append(ObjectError(kind, str(key), refuse[(kind, str(key))]))
    return sorted(refused, key=lambda e: (e.kind, e.id))
