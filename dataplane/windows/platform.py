"""WindowsPlatform: model values in, HNS ACLs and SetPolicy objects out, fewest calls.

A coordinator like the Linux one: desired state is kept by
:class:`~dataplane.windows.policy.desired.Desired`, ACLs are rendered by the pure
renderers, and :meth:`WindowsPlatform.apply` is the only code that calls
HNS, in one fixed order:

1. Read HNS when it must, incrementally (:mod:`dataplane.windows.view.hns_listing`): the first
   apply lists everything; an endpoint not found yet enumerates our
   networks' endpoints and reads only the new ones, writing a new pod's
   ACLs through the handle that read it; the refresh timer
   (:mod:`dataplane.windows.view.hns_refresh`) spreads re-reads over the interval.
2. Sets (HNS 13.0 and later): new and changed ``SetPolicy`` objects, one
   ``ModifyNetwork`` per request type and network, before any ACL names them.
3. Endpoints: for each whose rendered ACL list differs from what HNS holds,
   one ``ModifyEndpoint`` replacing the whole list. Identical lists are never
   re-sent: re-applying ACLs resets connections on a real host.
4. VXLAN routes (:mod:`dataplane.windows.overlay.vxlan_programmer`): one
   ``ModifyNetwork`` per ``RemoteSubnetRoute`` that differs, after the ACLs
   so that no pod is reachable from other nodes before its policy is in.
5. Service load balancers and their remote endpoints
   (:mod:`dataplane.windows.services.lb_programmer`): only the differences, after
   the routes that reach remote backends.
6. Sets no longer wanted, once no ACL names them.

A restart adopts what it finds: HNS already holding the rendered lists
means zero modify calls. The refresh re-reads HNS and repairs any endpoint
whose ACLs someone else changed within two intervals. A failed call leaves that endpoint (or
set) pending; what HNS refuses is quarantined by the programmers
(:mod:`dataplane.windows.policy.programmers`) and retried alone with backoff, its
workloads report ``error``, and the apply still succeeds. Only a failure to
read HNS at all fails the apply (the loop's backoff retries it).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

import trio

from dataplane.config import Config
from dataplane.core.healthcheck import HealthCheckServer
from dataplane.core.platform import EndpointKey
from dataplane.model import (
    DirectionPolicy,
    EndpointStatus,
    IPSetType,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)
from dataplane.windows.hns.acl import AclRule
from dataplane.windows.hns.calls import Offload, in_thread
from dataplane.windows.hns.hcn import HCN, HnsVersion, Json, WriteAfterRead
from dataplane.windows.hns.hns_meter import HnsMeter
from dataplane.windows.overlay.vxlan_programmer import VxlanProgrammer
from dataplane.windows.policy.acl_render import (
    DirectionAcls,
    FailClosed,
    RenderContext,
    render_direction,
)
from dataplane.windows.policy.desired import Desired
from dataplane.windows.policy.endpoint_render import render_endpoint, render_fail_closed
from dataplane.windows.policy.programmers import (
    EndpointProgrammer,
    SetProgrammer,
    log_refusals,
)
from dataplane.windows.policy.qos_policy import QosProgrammer
from dataplane.windows.policy.set_policy import set_token, wanted_sets
from dataplane.windows.reports import WindowsReports
from dataplane.windows.services.lb_programmer import LbProgrammer, lb_options
from dataplane.windows.services.lb_state import OwnedIds
from dataplane.windows.sinks import WindowsSinks
from dataplane.windows.view.hns_listing import HnsListing
from dataplane.windows.view.hns_refresh import DEFAULT_RATE, RefreshCycle, Tick
from dataplane.windows.view.hns_view import DEFAULT_NETWORK_PATTERN, HnsEndpoint, HnsView, acl_key

if TYPE_CHECKING:
    from dataplane.ops.metrics import Metrics

__all__ = ["WindowsPlatform"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# While a workload's HNS endpoint is missing, look again this often: the CNI
# creates it moments after Felix announces the workload.
_PENDING_RETRY_SECONDS = 2.0


class WindowsPlatform(WindowsSinks, WindowsReports):
    name = "windows"

    def __init__(
        self,
        hcn: HCN,
        *,
        network_pattern: str = DEFAULT_NETWORK_PATTERN,
        host_addresses: tuple[str, ...] = (),
        use_set_policy: bool | None = None,
        clock: Callable[[], float] = trio.current_time,
        offload: Offload = in_thread,
        owned_load_balancers: OwnedIds | None = None,
        refresh_rate: float = DEFAULT_RATE,
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
        self._listing = HnsListing(hcn, self._call, network_pattern)
        self._refresh = RefreshCycle(rate=refresh_rate)
        self._must_list = True
        self._endpoints: EndpointProgrammer[WorkloadEndpointKey] = EndpointProgrammer(
            hcn, self._call, clock
        )
        self._qos: QosProgrammer[WorkloadEndpointKey] = QosProgrammer(hcn, self._call)
        self._sets = SetProgrammer(hcn, self._call, clock)
        self._sets_pending = True
        self._vxlan = VxlanProgrammer(hcn, self._call, clock)
        self._statuses: dict[EndpointKey, EndpointStatus] = {}
        self._reported: set[FailClosed] = set()
        self._last_apply = -math.inf
        self._unsupported_logged: set[str] = set()
        owned = OwnedIds() if owned_load_balancers is None else owned_load_balancers
        self._lbs = LbProgrammer(hcn, self._call, clock, owned)
        self._meter: HnsMeter | None = None
        # kube-proxy's serviceProxyHealthy: the last apply succeeded.
        self._applied_ok = False
        self._health = HealthCheckServer(host_addresses, healthy=lambda: self._applied_ok)

    def configure(self, config: Config) -> None:
        self.config = config
        self._desired.touch_all()
        self._vxlan.touch()  # the VNI or this node's name may have changed
        if self._listing.view is not None:  # the refresh interval may have changed
            self._refresh.schedule(self._clock(), config.endpoint_refresh_interval)

    # --- helpers ----------------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: object) -> T:
        """One blocking HCN call, off the event loop: every HNS call comes through here."""
        call: Callable[[], T] = functools.partial(fn, *args)
        if self._meter is not None:
            call = self._meter.wrap(fn, call)
        return await self._offload(call)

    def bind_metrics(
        self, metrics: Metrics, *, timer: Callable[[], float] = time.perf_counter
    ) -> None:
        """Count every HNS call into ``metrics`` by function, with its latency
        (read with ``timer``) and failures; call once, before the first apply."""
        self._meter = HnsMeter(metrics, lambda: self.hcn.calls, timer)

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
        try:
            await self._apply()
        except BaseException:
            self._applied_ok = False
            raise
        self._applied_ok = True
        self._health.update(self._lbs.wanted.health_checks())

    async def _apply(self) -> None:
        if self._version is None:
            self._version = await self._call(self.hcn.version)
            log.info("HNS version %s", self._version)
        dirty, changed_sets = self._desired.take_changes()
        self._render(dirty)
        if changed_sets:
            self._sets.release_all()  # new set contents get a fresh chance
        reading = await self._read_networks()
        view = self._view
        assert view is not None
        sets = self._sets_as_objects() and bool(changed_sets or self._sets_pending)
        if sets:
            wanted = wanted_sets(self._desired.sets.values())  # rendered once per apply
            await self._sets.apply(view, wanted, removals=False)
        # After the sets: a new pod's ACLs may be written as its endpoint is read.
        await self._read_endpoints(reading)
        fail_closed = render_fail_closed(self._host_addresses, self._versions())
        if await self._endpoints.apply(view, self._find, fail_closed):
            self._must_list = True
        if await self._qos.apply(view, self._find):
            self._must_list = True
        vni, node = self.config.vxlan_vni, self.config.felix_hostname
        if await self._vxlan.apply(view, vni, node):
            self._must_list = True
        options = lb_options(self.config, self._version, self._versions(), view)
        if await self._lbs.apply(view, options, self._version, self._vxlan.provider):
            self._must_list = True
        if sets:
            await self._sets.apply(view, wanted, removals=True)
            self._sets_pending = bool(self._sets.held)
        await self._call(self.hcn.flush)
        log_refusals(self._endpoints.take_refusals(), self._sets.take_refusals())
        for key, why in self._qos.take_refusals():
            log.error("QOS policy of workload %s refused by HNS: %s; retried", key, why)
        self._statuses = self._endpoint_statuses(view)
        self._last_apply = self._clock()

    def _find(self, key: WorkloadEndpointKey) -> HnsEndpoint | None:
        assert self._view is not None
        return self._view.find(_addresses(self._desired.endpoints[key]))

    def _endpoint_statuses(self, view: HnsView) -> dict[EndpointKey, EndpointStatus]:
        statuses: dict[EndpointKey, EndpointStatus] = {
            key: EndpointStatus.UP
            if view.find(_addresses(ep)) is not None and key not in self._endpoints.pending
            else EndpointStatus.DOWN
            for key, ep in self._desired.endpoints.items()
        }
        # Not as asked: HNS refused the endpoint's ACLs, or sets its rules name.
        failing: set[EndpointKey] = set(self._endpoints.held)
        stale = {s for ids in self._sets.failed_sets.values() for s in ids}
        if stale:
            failing |= self._desired.users.endpoints_using_sets(stale)
        for key in failing & statuses.keys():
            statuses[key] = EndpointStatus.ERROR
        return statuses

    def _unmapped(self) -> bool:
        """Is an endpoint (a workload, or a local service backend) waiting for its HNS endpoint?"""
        return self._view is not None and (
            any(self._find(k) is None for k in self._endpoints.pending)
            or self._lbs.awaits_local_endpoints()
        )

    @property
    def _view(self) -> HnsView | None:
        return self._listing.view

    async def _read_networks(self) -> Tick | None:
        """Start bringing the view up to date with HNS: what to read this apply
        (None: only new endpoints, if a workload waits for one), networks first."""
        now = self._clock()
        if self._must_list or self._listing.view is None:
            # The first apply, or a call failed (it may have landed): the networks,
            # then every endpoint not known.
            tick = Tick(networks=True, reads=())
            self._must_list = False
        elif self._refresh.due(now):
            tick = self._refresh.take(now, self._endpoints.mapped(self._find))
        else:
            return None
        if tick.networks:
            await self._listing.networks()
            self._sets_pending = True
            self._vxlan.touch()
        self._refresh.schedule(now, self.config.endpoint_refresh_interval)
        self._lbs.must_list = True  # one enumerate: a deleted load balancer shows
        return tick

    async def _read_endpoints(self, tick: Tick | None) -> None:
        """Finish it: enumerate, read what is new (writing a pod's ACLs through the
        handle that reads its endpoint), and this tick's share of re-reads."""
        listing = self._listing
        if tick is not None:
            await listing.endpoints(self._first_writes())
            await listing.reread(tick.reads)
        elif not (self._unmapped() and await listing.endpoints(self._first_writes())):
            return  # nobody waits for an endpoint, or none came or went
        assert listing.view is not None
        self._endpoints.recheck_all()  # what HNS holds decides which need a write
        self._qos.recheck_all()
        self._lbs.observe(listing.view)

    def _first_writes(self) -> WriteAfterRead | None:
        """For endpoints about to be read for the first time: a pod's ACLs, to be
        written through the handle that reads its endpoint
        (:mod:`dataplane.windows.view.hns_listing`)."""
        wanted: dict[str, tuple[Json, Counter[AclRule]]] = {}
        for key in self._endpoints.pending:
            if key in self._endpoints.held or self._find(key) is not None:
                continue  # held back, or its endpoint is known: the programmer's
            write = self._endpoints.write_for(key)
            if write is not None:
                for address in _addresses(self._desired.endpoints[key]):
                    wanted[address] = write
        if not wanted:
            return None

        def then(endpoint: Json) -> Json | None:
            for config in endpoint.get("IpConfigurations") or ():
                try:
                    address = str(ipaddress.ip_address(config.get("IpAddress", "")))
                except ValueError:
                    continue
                found = wanted.get(address)
                if found is not None:
                    request, acls = found
                    return None if acl_key(endpoint.get("Policies") or []) == acls else request
            return None

        return then

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
            self._endpoints.want(key, rendered)
            for note in rendered.fail_closed:
                if note not in self._reported:
                    self._reported.add(note)
                    log.warning("fails closed: %s", note)

    # --- status, timers, dump --------------------------------------------------------------

    def endpoint_statuses(self) -> Mapping[EndpointKey, EndpointStatus]:
        return self._statuses

    def wants_apply_at(self) -> float:
        if self._view is None:
            return math.inf
        # Refused endpoints and networks are retried alone when their backoff ends.
        due = min(
            self._refresh.next_tick,
            self._endpoints.held.next_retry(),
            self._sets.held.next_retry(),
            self._vxlan.held.next_retry(),
            self._lbs.held.next_retry(),
            self._lbs.remotes_held.next_retry(),
            self._last_apply if self._lbs.again else math.inf,
        )
        if self._must_list or self._unmapped():
            return min(due, self._last_apply + _PENDING_RETRY_SECONDS)
        return due

    async def serve(self) -> None:
        """Health-check node ports, on the node's addresses (all where none is given)."""
        await self._health.serve()

    def dump(self) -> str:
        out = [f"windows platform, HNS {self._version}"]
        view = self._view or HnsView()
        out.extend(self._sets.dump(view))
        out.extend(self._vxlan.dump(view))
        out.extend(self._lbs.dump())
        endpoints = self._desired.endpoints
        out.extend(
            self._endpoints.dump(sorted(endpoints), lambda k: view.find(_addresses(endpoints[k])))
        )
        notes = self.fail_closed()
        out.append(f"fails closed: {len(notes)} rule(s)")
        out.extend(f"  {note}" for note in notes)
        calls = ", ".join(f"{name} {n}" for name, n in sorted(self.hcn.calls.items()))
        out.append(f"HNS calls so far: {calls or 'none'}")
        return "\n".join(out) + "\n"


def _addresses(endpoint: WorkloadEndpoint) -> tuple[str, ...]:
    return tuple(net.split("/")[0] for net in (*endpoint.ipv4_nets, *endpoint.ipv6_nets))
