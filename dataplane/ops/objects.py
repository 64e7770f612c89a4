"""Every desired object with its reconciliation status, as Cilium's tables show them.

:class:`TrackedPlatform` sits between the managers and the real platform.
Each change handed down is forwarded unchanged and noted: the object is
``pending`` from that moment; when an apply succeeds, every pending object
is ``done``; when it fails, they are ``error`` with the apply's reason
(still retried); and whatever the platform reports it holds in quarantine
(:class:`~dataplane.core.platform.ObjectError`) is ``error`` with the
kernel's or HNS's reason until it is programmed. ``since`` is when the
object entered its status.

It also keeps the desired model itself (a :class:`~dataplane.sim.platform.SimState`
whose values are the platform's own frozen objects, so it costs references,
not copies), which is what ``show`` prints and ``explain`` evaluates.
:meth:`TrackedPlatform.snapshot` freezes both for another thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from dataplane.config import Config
from dataplane.core.platform import EndpointKey, ObjectError, Platform, PolicyUsers
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
from dataplane.ops.kinds import OWN_KINDS
from dataplane.sim.platform import SimState

__all__ = ["ObjectRecord", "Snapshot", "Status", "TrackedPlatform"]

Status = Literal["pending", "done", "error"]
Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class ObjectRecord:
    """One desired object's reconciliation status."""

    kind: str
    id: str
    status: Status
    since: float  # Unix time it entered this status
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The desired state, each object's status and each endpoint's oper status, at one time."""

    state: SimState
    records: Mapping[Key, ObjectRecord]
    oper: Mapping[EndpointKey, EndpointStatus]
    taken_at: float
    config: Config = field(default_factory=Config)
    platform: str = "sim"  # the platform's name: linux, windows or sim
    # Where services come from: Felix's (or a log's) messages, or the
    # Kubernetes API (--services-source kubernetes).
    services_source: str = "messages"
    # False until a first apply from a complete state (after InSync) has
    # succeeded: the objects are then received, not programmed, and
    # ``waiting`` says in one line what the node waits for.
    in_sync: bool = False
    waiting: str = ""


class TrackedPlatform:
    """A platform, with each object's status and the desired model kept beside it.

    Args:
        platform: the platform that does the work; every call is forwarded.
        wall_clock: Unix time for ``since``.
    """

    def __init__(self, platform: Platform, *, wall_clock: Callable[[], float] = time.time) -> None:
        self.inner = platform
        self.name = platform.name
        self._clock = wall_clock
        self.desired = SimState()
        self._members: dict[str, set[str]] = {}
        self._records: dict[Key, ObjectRecord] = {}
        self._pending: set[Key] = set()
        # What the platform reported refused at the last apply, with why.
        self._refused: dict[Key, str] = {}
        self.config = Config()
        self.services_source = "messages"
        self.in_sync = False  # set by the observer, published with each snapshot
        self.waiting = "no input yet"
        self._snapshot = Snapshot(SimState(), {}, {}, wall_clock())

    def __getattr__(self, name: str) -> object:
        # Platform-specific extras (quarantined(), backend, set_wakeup, ...).
        return getattr(self.inner, name)

    # --- bookkeeping ----------------------------------------------------------------------

    def _set(self, kind: str, ident: str) -> None:
        key = (kind, ident)
        self._pending.add(key)
        record = self._records.get(key)
        if record is None or record.status != "pending":
            self._records[key] = ObjectRecord(kind, ident, "pending", self._clock())

    def _remove(self, kind: str, ident: str) -> None:
        key = (kind, ident)
        self._pending.discard(key)
        self._records.pop(key, None)

    def _settle(self, apply_error: str | None) -> None:
        now = self._clock()
        refused: dict[Key, str] = {}
        object_errors: Callable[[], list[ObjectError]] | None = getattr(
            self.inner, "object_errors", None
        )
        if object_errors is not None:
            refused = {(e.kind, e.id): e.reason for e in object_errors()}
        records = self._records
        if apply_error is not None:
            for key in self._pending:
                old = records[key]
                if old.status != "error" or old.error != apply_error:
                    records[key] = ObjectRecord(*key, "error", now, apply_error)
        else:
            for key in self._pending:
                records[key] = ObjectRecord(*key, "done", now)
            self._pending.clear()
        for key, reason in refused.items():
            held = records.get(key)
            if held is None or held.status != "error" or held.error != reason:
                since = held.since if held is not None and held.status == "error" else now
                records[key] = ObjectRecord(*key, "error", since, reason)
        # Refused before, programmed now (a retry succeeded).
        for key in self._refused.keys() - refused.keys():
            was = records.get(key)
            if was is not None and key not in self._pending and was.status == "error":
                if key[0] in _OWN_KINDS:
                    del records[key]  # the platform's own objects exist only while refused
                else:
                    records[key] = ObjectRecord(*key, "done", now)
        self._refused = refused

    def refuse_field(self, path: str, why: str) -> None:
        """A field Felix sent that the driver does not act on: an error record for good
        (every message carrying it is programmed without it)."""
        self._records[("field", path)] = ObjectRecord(
            "field", path, "error", self._clock(), f"{path} refused: {why}"
        )

    def refused_objects(self) -> dict[Key, str]:
        """(kind, id) -> reason of every object the platform holds in quarantine now.

        Not the objects a whole failed apply left in ``error``: those are
        pending a retry of everything, not refused alone.
        """
        return dict(self._refused)

    def _freeze_sets(self) -> None:
        for set_id, members in self._members.items():
            old = self.desired.ipsets[set_id]
            if len(old.members) != len(members) or old.members != members:
                self.desired.ipsets[set_id] = IPSet(set_id, old.type, frozenset(members))

    def snapshot(self) -> Snapshot:
        """The last published state (safe to read from any thread)."""
        return self._snapshot

    def publish(self) -> Snapshot:
        """Freeze the state now for other threads; returns it."""
        self._snapshot = Snapshot(
            self.desired.copy(),
            dict(self._records),
            dict(self.inner.endpoint_statuses()),
            self._clock(),
            self.config,
            self.name,
            self.services_source,
            self.in_sync,
            "" if self.in_sync else self.waiting,
        )
        return self._snapshot

    # --- IPSetsSink ---------------------------------------------------------------------

    def replace_ipset(self, ipset: IPSet) -> None:
        self.desired.ipsets[ipset.id] = ipset
        self._members.pop(ipset.id, None)
        self._set("ipset", ipset.id)
        self.inner.replace_ipset(ipset)

    def update_ipset_members(
        self, set_id: str, added: frozenset[str], removed: frozenset[str]
    ) -> None:
        self.inner.update_ipset_members(set_id, added, removed)
        if set_id not in self.desired.ipsets:
            return  # the platform took a delta for a set it never had; nothing to track
        members = self._members.get(set_id)
        if members is None:
            members = self._members[set_id] = set(self.desired.ipsets[set_id].members)
        members -= removed
        members |= added
        self._set("ipset", set_id)

    def remove_ipset(self, set_id: str) -> None:
        self.desired.ipsets.pop(set_id, None)
        self._members.pop(set_id, None)
        self._remove("ipset", set_id)
        self.inner.remove_ipset(set_id)

    # --- RulesSink ----------------------------------------------------------------------

    def set_policy(self, key: PolicyKey, policy: Policy) -> None:
        self.desired.policies[key] = policy
        self._set("policy", str(key))
        self.inner.set_policy(key, policy)

    def remove_policy(self, key: PolicyKey) -> None:
        self.desired.policies.pop(key, None)
        self._remove("policy", str(key))
        self.inner.remove_policy(key)

    def set_profile(self, profile_id: str, profile: Profile) -> None:
        self.desired.profiles[profile_id] = profile
        self._set("profile", profile_id)
        self.inner.set_profile(profile_id, profile)

    def remove_profile(self, profile_id: str) -> None:
        self.desired.profiles.pop(profile_id, None)
        self._remove("profile", profile_id)
        self.inner.remove_profile(profile_id)

    # --- EndpointsSink ------------------------------------------------------------------

    def set_workload_endpoint(self, endpoint: WorkloadEndpoint, policy: EffectivePolicy) -> None:
        self.desired.workload_endpoints[endpoint.key] = endpoint
        self.desired.effective[endpoint.key] = policy
        self._set("workload_endpoint", str(endpoint.key))
        self.inner.set_workload_endpoint(endpoint, policy)

    def remove_workload_endpoint(self, key: WorkloadEndpointKey) -> None:
        self.desired.workload_endpoints.pop(key, None)
        self.desired.effective.pop(key, None)
        self._remove("workload_endpoint", str(key))
        self.inner.remove_workload_endpoint(key)

    def set_host_endpoint(self, endpoint: HostEndpoint, policy: HostEffectivePolicy) -> None:
        self.desired.host_endpoints[endpoint.key] = endpoint
        self.desired.effective[endpoint.key] = policy
        self._set("host_endpoint", str(endpoint.key))
        self.inner.set_host_endpoint(endpoint, policy)

    def remove_host_endpoint(self, key: HostEndpointKey) -> None:
        self.desired.host_endpoints.pop(key, None)
        self.desired.effective.pop(key, None)
        self._remove("host_endpoint", str(key))
        self.inner.remove_host_endpoint(key)

    # --- PoolsSink, RoutesSink, HostsSink -----------------------------------------------

    def set_ip_pool(self, pool_id: str, pool: IPPool) -> None:
        self.desired.ip_pools[pool_id] = pool
        self._set("ip_pool", pool_id)
        self.inner.set_ip_pool(pool_id, pool)

    def remove_ip_pool(self, pool_id: str) -> None:
        self.desired.ip_pools.pop(pool_id, None)
        self._remove("ip_pool", pool_id)
        self.inner.remove_ip_pool(pool_id)

    def set_vtep(self, vtep: Vtep) -> None:
        self.desired.vteps[vtep.node] = vtep
        self._set("vtep", vtep.node)
        self.inner.set_vtep(vtep)

    def remove_vtep(self, node: str) -> None:
        self.desired.vteps.pop(node, None)
        self._remove("vtep", node)
        self.inner.remove_vtep(node)

    def set_route(self, route: Route) -> None:
        self.desired.routes[route.dst] = route
        self._set("route", route.dst)
        self.inner.set_route(route)

    def remove_route(self, dst: str) -> None:
        self.desired.routes.pop(dst, None)
        self._remove("route", dst)
        self.inner.remove_route(dst)

    def set_host(self, host: Host) -> None:
        self.desired.hosts[host.name] = host
        self._set("host", host.name)
        self.inner.set_host(host)

    def remove_host(self, name: str) -> None:
        self.desired.hosts.pop(name, None)
        self._remove("host", name)
        self.inner.remove_host(name)

    def set_encapsulation(self, encapsulation: Encapsulation) -> None:
        self.desired.encapsulation = encapsulation
        self.inner.set_encapsulation(encapsulation)

    # --- ServicesSink -------------------------------------------------------------------

    def set_service(self, service: Service) -> None:
        self.desired.services[service.key] = service
        self._set("service", str(service.key))
        self.inner.set_service(service)

    def remove_service(self, key: ServiceKey) -> None:
        self.desired.services.pop(key, None)
        self._remove("service", str(key))
        self.inner.remove_service(key)

    # --- Platform -----------------------------------------------------------------------

    def bind_policy_users(self, users: PolicyUsers) -> None:
        self.inner.bind_policy_users(users)

    def wants_apply_at(self) -> float:
        return self.inner.wants_apply_at()

    def configure(self, config: Config) -> None:
        self.config = config  # explain judges pod-to-host traffic by it
        self.inner.configure(config)
        # A setting the driver refuses is an error record of its own while
        # Felix sends it (docs/felix-parity.md): show lists it with why.
        now = self._clock()
        refused = {("setting", r.key): r for r in config.refused}
        for key in [k for k in self._records if k[0] == "setting" and k not in refused]:
            del self._records[key]
        for key, r in refused.items():
            error = f"{r.key}={r.value!r} refused: {r.why}"
            held = self._records.get(key)
            if held is None or held.error != error:
                self._records[key] = ObjectRecord(*key, "error", now, error)

    async def apply(self) -> None:
        self._freeze_sets()
        try:
            await self.inner.apply()
        except BaseException as exc:
            self._settle(str(exc) or type(exc).__name__)
            raise
        self._settle(None)

    def endpoint_statuses(self) -> Mapping[EndpointKey, EndpointStatus]:
        return self.inner.endpoint_statuses()

    def dump(self) -> str:
        return self.inner.dump()

    async def serve(self) -> None:
        await self.inner.serve()


_OWN_KINDS = frozenset(OWN_KINDS)
