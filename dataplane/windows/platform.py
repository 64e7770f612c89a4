"""WindowsPlatform: model values in, HNS ACLs and SetPolicy objects out, fewest calls.

A coordinator like the Linux one: desired state is kept by
:class:`~dataplane.windows.desired.Desired`, ACLs are rendered by the pure
renderers, and :meth:`WindowsPlatform.apply` is the only code that calls
HNS, in one fixed order:

1. Read HNS when it must (first apply, refresh timer, an endpoint not found
   yet or gone): one ``EnumerateNetworks`` and one ``EnumerateEndpoints``,
   never a call per workload.
2. Sets (HNS 13.0 and later): new and changed ``SetPolicy`` objects, one
   ``ModifyNetwork`` per request type and network, before any ACL names them.
3. Endpoints: for each whose rendered ACL list differs from what HNS holds,
   one ``ModifyEndpoint`` replacing the whole list. Identical lists are never
   re-sent: re-applying ACLs resets connections on a real host.
4. Sets no longer wanted, once no ACL names them.

A restart adopts what it finds: HNS already holding the rendered lists
means zero modify calls. A refresh re-reads HNS and repairs any endpoint
whose ACLs someone else changed. A failed call leaves that endpoint (or
set) pending and the apply fails after trying the rest, so the loop's
backoff retries only what is still different.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, TypeVar

import trio

from dataplane.config import Config
from dataplane.core.platform import EndpointKey, PolicyUsers
from dataplane.errors import ProgrammingError
from dataplane.model import (
    DirectionPolicy,
    EffectivePolicy,
    EndpointStatus,
    HostEffectivePolicy,
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
from dataplane.model.services import Service, ServiceKey
from dataplane.windows.acl import AclRule
from dataplane.windows.acl_render import DirectionAcls, FailClosed, RenderContext, render_direction
from dataplane.windows.desired import Desired
from dataplane.windows.endpoint_render import EndpointAcls, render_endpoint
from dataplane.windows.hcn import HCN, HcnError, HnsVersion, Json
from dataplane.windows.hns_view import DEFAULT_NETWORK_PATTERN, HnsView, acl_key
from dataplane.windows.set_policy import set_policy, set_policy_changes, set_token

__all__ = ["WindowsPlatform"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class Offload(Protocol):
    """How a blocking HCN call runs without blocking the loop (a worker thread)."""

    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]: ...


async def _in_thread(fn: Callable[[], T]) -> T:
    return await trio.to_thread.run_sync(fn)


# While a workload's HNS endpoint is missing, look again this often: the CNI
# creates it moments after Felix announces the workload.
_PENDING_RETRY_SECONDS = 2.0


class WindowsPlatform:
    name = "windows"

    def __init__(
        self,
        hcn: HCN,
        *,
        network_pattern: str = DEFAULT_NETWORK_PATTERN,
        host_addresses: tuple[str, ...] = (),
        use_set_policy: bool | None = None,
        clock: Callable[[], float] = trio.current_time,
        offload: Offload = _in_thread,
    ) -> None:
        self.hcn = hcn
        self._offload = offload
        self.config = Config()
        self._pattern = network_pattern
        self._host_addresses = host_addresses
        self._use_set_policy = use_set_policy
        self._clock = clock
        self._desired = Desired()
        self._version: HnsVersion | None = None
        self._view: HnsView | None = None
        self._must_list = True
        self._rendered: dict[WorkloadEndpointKey, EndpointAcls] = {}
        self._wanted_keys: dict[WorkloadEndpointKey, Counter[AclRule]] = {}
        self._pending: set[WorkloadEndpointKey] = set()  # rendered, not yet in HNS
        self._sets_pending = True
        self._statuses: dict[EndpointKey, EndpointStatus] = {}
        self._reported: set[FailClosed] = set()
        self._next_refresh = math.inf
        self._last_apply = -math.inf
        self._unsupported_logged: set[str] = set()
        self.services: dict[ServiceKey, Service] = {}

    # --- sinks ----------------------------------------------------------------

    def bind_policy_users(self, users: PolicyUsers) -> None:
        self._desired.users = users

    def replace_ipset(self, ipset: IPSet) -> None:
        self._desired.replace_ipset(ipset)

    def update_ipset_members(
        self, set_id: str, added: frozenset[str], removed: frozenset[str]
    ) -> None:
        self._desired.update_ipset_members(set_id, added, removed)

    def remove_ipset(self, set_id: str) -> None:
        self._desired.remove_ipset(set_id)

    def set_policy(self, key: PolicyKey, policy: Policy) -> None:
        self._desired.set_policy(key, policy)

    def remove_policy(self, key: PolicyKey) -> None:
        self._desired.set_policy(key, None)

    def set_profile(self, profile_id: str, profile: Profile) -> None:
        self._desired.set_profile(profile_id, profile)

    def remove_profile(self, profile_id: str) -> None:
        self._desired.set_profile(profile_id, None)

    def set_workload_endpoint(self, endpoint: WorkloadEndpoint, policy: EffectivePolicy) -> None:
        self._desired.set_endpoint(endpoint, policy)

    def remove_workload_endpoint(self, key: WorkloadEndpointKey) -> None:
        # HNS drops an endpoint's ACLs with the endpoint; the CNI deletes it.
        self._desired.remove_endpoint(key)
        self._rendered.pop(key, None)
        self._wanted_keys.pop(key, None)
        self._pending.discard(key)

    def _unsupported(self, what: str) -> None:
        if what not in self._unsupported_logged:
            self._unsupported_logged.add(what)
            log.warning("%s: not programmed on Windows (Felix has no Windows form either)", what)

    def set_host_endpoint(self, endpoint: HostEndpoint, policy: HostEffectivePolicy) -> None:
        self._unsupported("host endpoints")

    def remove_host_endpoint(self, key: HostEndpointKey) -> None:
        pass

    def set_ip_pool(self, pool_id: str, pool: IPPool) -> None:
        # Outgoing NAT on Windows is the HNS network's OutBoundNAT policy, set
        # up with the network by the CNI; pools change nothing here.
        pass

    def remove_ip_pool(self, pool_id: str) -> None:
        pass

    def set_service(self, service: Service) -> None:
        self.services[service.key] = service

    def remove_service(self, key: ServiceKey) -> None:
        self.services.pop(key, None)

    def configure(self, config: Config) -> None:
        self.config = config
        self._desired.touch_all()

    # --- helpers ----------------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: object) -> T:
        """One blocking HCN call, off the event loop."""
        return await self._offload(functools.partial(fn, *args))

    @property
    def version(self) -> HnsVersion | None:
        """The host's HNS version, once the first apply read it."""
        return self._version

    def _versions(self) -> tuple[int, ...]:
        assert self._version is not None
        dual = self.config.ipv6_support and self._version.supports("IPv6DualStack")
        return (4, 6) if dual else (4,)

    def _sets_as_objects(self) -> bool:
        assert self._version is not None
        if self._use_set_policy is not None:
            return self._use_set_policy and self._version.supports("SetPolicy")
        return self._version.supports("SetPolicy")

    def _token(self, set_id: str) -> str | None:
        ipset = self._desired.sets.get(set_id)
        if ipset is None or ipset.type is IPSetType.IP_AND_PORT:
            return None
        return set_token(set_id)

    # --- apply ----------------------------------------------------------------------

    async def apply(self) -> None:
        if self._version is None:
            self._version = await self._call(self.hcn.version)
            log.info("HNS version %s", self._version)
        dirty, changed_sets = self._desired.take_changes()
        self._render(dirty)
        # A workload still without its HNS endpoint: the CNI may have made it since.
        if (
            self._must_list
            or self._view is None
            or self._clock() >= self._next_refresh
            or self._unmapped()
        ):
            await self._list()
        view = self._view
        assert view is not None
        failures: list[str] = []
        sets = self._sets_as_objects() and bool(changed_sets or self._sets_pending)
        if sets:
            failures += await self._program_sets(view, removals=False)
        failures += await self._program_endpoints(view)
        if sets:
            failures += await self._program_sets(view, removals=True)
            self._sets_pending = bool(failures)
        await self._call(self.hcn.flush)
        self._statuses = {
            key: EndpointStatus.UP
            if view.find(_addresses(ep)) is not None and key not in self._pending
            else EndpointStatus.DOWN
            for key, ep in self._desired.endpoints.items()
        }
        self._last_apply = self._clock()
        if failures:
            raise ProgrammingError(
                f"{len(failures)} HNS call(s) failed, retried at the next apply: {failures[0]}"
            )

    def _unmapped(self) -> bool:
        """Is an endpoint waiting for its HNS endpoint?"""
        view = self._view
        return view is not None and any(
            view.find(_addresses(self._desired.endpoints[k])) is None for k in self._pending
        )

    async def _list(self) -> None:
        networks = await self._call(self.hcn.list_networks)
        endpoints = await self._call(self.hcn.list_endpoints)
        self._view = HnsView.build(networks, endpoints, self._pattern)
        self._must_list = False
        self._sets_pending = True
        interval = self.config.endpoint_refresh_interval
        self._next_refresh = self._clock() + interval if interval > 0 else math.inf
        # What HNS holds now decides which endpoints need a write.
        self._pending = set(self._rendered)

    def _render(self, dirty: set[WorkloadEndpointKey]) -> None:
        desired = self._desired
        context = RenderContext(
            desired.policies,
            desired.profiles,
            desired.sets,
            self._versions(),
            self._token if self._sets_as_objects() else (lambda set_id: None),
        )
        memo: dict[tuple[DirectionPolicy, bool], DirectionAcls] = {}

        def direction(policy: DirectionPolicy, inbound: bool) -> DirectionAcls:
            found = memo.get((policy, inbound))
            if found is None:
                found = memo[(policy, inbound)] = render_direction(policy, inbound, context)
            return found

        for key in dirty:
            rendered = render_endpoint(
                desired.endpoints[key],
                desired.effective[key],
                context,
                self._host_addresses,
                direction,
            )
            if self._rendered.get(key) != rendered:
                self._rendered[key] = rendered
                # Read as HNS's copy is read, so the two compare like for like.
                self._wanted_keys[key] = acl_key([a.policy() for a in rendered.acls])
                self._pending.add(key)
            for note in rendered.fail_closed:
                if note not in self._reported:
                    self._reported.add(note)
                    log.warning("fails closed: %s", note)

    async def _program_endpoints(self, view: HnsView) -> list[str]:
        failures: list[str] = []
        for key in sorted(self._pending):
            endpoint = view.find(_addresses(self._desired.endpoints[key]))
            if endpoint is None:
                continue  # not created by the CNI yet; looked for again later
            wanted = self._wanted_keys[key]
            if endpoint.acls == wanted:
                self._pending.discard(key)  # HNS already holds it: adopt, no call
                continue
            policies = [a.policy() for a in self._rendered[key].acls]
            request: Json = {
                "ResourceType": "Policy",
                "RequestType": "Update",
                "Settings": {"Policies": policies},
            }
            try:
                await self._call(self.hcn.modify_endpoint, endpoint.id, request)
            except HcnError as exc:
                if exc.not_found:
                    view.forget(endpoint.id)
                    self._must_list = True
                    continue
                failures.append(f"{key}: {exc}")
                continue
            endpoint.acls = Counter(wanted)
            self._pending.discard(key)
        return failures

    async def _program_sets(self, view: HnsView, *, removals: bool) -> list[str]:
        wanted = {
            set_token(s.id): set_policy(s)
            for s in self._desired.sets.values()
            if s.type is not IPSetType.IP_AND_PORT
        }
        failures: list[str] = []
        for network_id, network in view.networks.items():
            changes = set_policy_changes(network, wanted)
            for kind in ("Remove",) if removals else ("Add", "Update"):
                policies = changes.get(kind)
                if not policies:
                    continue
                request = {
                    "ResourceType": "Policy",
                    "RequestType": kind,
                    "Settings": {"Policies": policies},
                }
                try:
                    await self._call(self.hcn.modify_network, network_id, request)
                except HcnError as exc:
                    failures.append(f"network {network_id} sets: {exc}")
                    self._must_list = True  # re-read what the network holds
                    continue
                network["Policies"] = _merged_sets(network.get("Policies") or [], kind, policies)
        return failures

    # --- status, timers, dump --------------------------------------------------------------

    def endpoint_statuses(self) -> Mapping[EndpointKey, EndpointStatus]:
        return self._statuses

    def wants_apply_at(self) -> float:
        if self._view is None:
            return math.inf
        if self._must_list or self._unmapped():
            return min(self._next_refresh, self._last_apply + _PENDING_RETRY_SECONDS)
        return self._next_refresh

    def fail_closed(self) -> list[FailClosed]:
        """Every rule in force now that HNS could not express exactly."""
        notes = {n for r in self._rendered.values() for n in r.fail_closed}
        return sorted(notes, key=str)

    async def serve(self) -> None:
        return

    def dump(self) -> str:
        out = [f"windows platform, HNS {self._version}"]
        view = self._view or HnsView()
        for network_id, network in sorted(view.networks.items()):
            sets = [p for p in network.get("Policies") or () if p.get("Type") == "SetPolicy"]
            out.append(f"network {network.get('Name')} {network_id}: {len(sets)} set(s)")
        for key in sorted(self._desired.endpoints):
            found = view.find(_addresses(self._desired.endpoints[key]))
            where = f"HNS endpoint {found.id}" if found else "no HNS endpoint yet"
            rendered = self._rendered.get(key)
            out.append(f"workload {key}: {where}")
            out.extend(f"  {acl}" for acl in (rendered.acls if rendered else ()))
        notes = self.fail_closed()
        out.append(f"fails closed: {len(notes)} rule(s)")
        out.extend(f"  {note}" for note in notes)
        calls = ", ".join(f"{name} {n}" for name, n in sorted(self.hcn.calls.items()))
        out.append(f"HNS calls so far: {calls or 'none'}")
        return "\n".join(out) + "\n"


def _addresses(endpoint: WorkloadEndpoint) -> tuple[str, ...]:
    return tuple(net.split("/")[0] for net in (*endpoint.ipv4_nets, *endpoint.ipv6_nets))


def _merged_sets(current: list[Json], kind: str, policies: list[Json]) -> list[Json]:
    """The network's policies after a successful set request (as HNS merges them)."""
    ids = {p["Settings"]["Id"] for p in policies}
    kept = [
        p
        for p in current
        if p.get("Type") != "SetPolicy" or (p.get("Settings") or {}).get("Id") not in ids
    ]
    return kept if kind == "Remove" else [*kept, *policies]
