"""LbProgrammer: the only code that writes HNS load balancers and remote endpoints.

Per apply, after the ACLs and VXLAN routes:

1. List load balancers when it must (the first apply, each refresh tick,
   after a call failed): one ``EnumerateLoadBalancers``, then a read only of
   ours not known yet (all of them at start) or whose write failed; a
   deleted one shows as a missing id. A load balancer changed in place by
   someone else is not noticed (kube-proxy does not notice either); one
   deleted is made again. Remote endpoints come from the platform's view,
   where the ones made here are put as they are created. Ours are the load
   balancers whose id is in the state file (:mod:`dataplane.windows.services.lb_state`)
   and the remote endpoints named with our prefix; nothing else is touched.
2. Resolve each wanted load balancer's backends to HNS endpoint ids: the
   CNI's endpoint for an address on this node, else our remote endpoint
   for it (on an Overlay network with its node's address as
   ``ProviderAddress``). A backend that cannot be resolved yet (its pod's
   endpoint not created, its node's VTEP not known) is left out and shown
   in the dump.
3. Create the remote endpoints that are missing, before any load balancer
   names them.
4. Delete our load balancers no longer wanted (freeing their frontends),
   then update changed ones (``ModifyLoadBalancer`` in place from HNS 15.4,
   else delete and create), then create new ones. Equal shapes
   (:mod:`dataplane.windows.services.lb_shape`) mean no call: a restart against the
   same host makes none.
5. Delete our remote endpoints that no load balancer names any more.

A failed call sets the object aside with backoff (:class:`Quarantine`),
marks HNS for listing again (the call may have happened: a listing shows
it, so a retry never duplicates it) and the rest of the apply goes on. HNS
saying "not found" means the object went behind our back (an HNS
restart): it is created again from the next listing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from dataplane.config import Config
from dataplane.core.quarantine import Quarantine, Rejection
from dataplane.windows.hns.calls import CallHcn
from dataplane.windows.hns.hcn import HCN, HcnError, HnsVersion, Json
from dataplane.windows.services.lb_desired import WantedLbs
from dataplane.windows.services.lb_render import (
    NO_SOURCE_VIP,
    LbKey,
    LbOptions,
    Note,
    WantedLb,
    load_balancer_json,
)
from dataplane.windows.services.lb_shape import Shape, key_of, shape_of
from dataplane.windows.services.lb_state import OwnedIds
from dataplane.windows.services.remote_endpoints import RemoteEndpoint, parse_remote
from dataplane.windows.services.remote_writes import Plan, RemoteWrites
from dataplane.windows.view.hns_view import HnsView

__all__ = ["LbProgrammer", "lb_options"]

log = logging.getLogger(__name__)

# (backend address, its node) -> the address its VXLAN packets go to ("" if unknown).
Provider = Callable[[str, str], str]


def _new_id() -> str:
    return str(uuid.uuid4()).upper()


class LbProgrammer(RemoteWrites):
    def __init__(
        self,
        hcn: HCN,
        call: CallHcn,
        clock: Callable[[], float],
        owned: OwnedIds,
        new_id: Callable[[], str] = _new_id,
    ) -> None:
        self._hcn = hcn
        self._call = call
        self.owned = owned
        self._new_id = new_id
        self.wanted = WantedLbs()
        self.must_list = True
        self._actual: dict[LbKey, tuple[str, Shape]] = {}  # ours, as HNS holds them
        self._extras: set[str] = set()  # ours HNS holds twice or in a shape we never make
        self._remotes: dict[str, tuple[str, RemoteEndpoint]] = {}  # ours, by address
        self._check: set[LbKey] = set()
        self._check_all = True
        self._stale: set[str] = set()  # ours whose write failed: read again at the next listing
        self.held: Quarantine[LbKey] = Quarantine(clock)
        self.remotes_held: Quarantine[str] = Quarantine(clock)
        self.waiting: dict[LbKey, tuple[str, ...]] = {}
        self._unlisted_local: set[LbKey] = set()  # waiting for the CNI's endpoint of a backend
        self.again = False  # a stale remote endpoint was removed: recreate it at once
        self._wanted_remotes: dict[str, RemoteEndpoint] = {}  # what this apply's plans name
        self._logged: set[Note] = set()
        self._stranded = 0  # services without a source VIP, as last said
        self._said_no_vip = False

    # --- what changed -----------------------------------------------------------

    def touch(self) -> None:
        """Backends may resolve differently (endpoints listed, VTEPs changed)."""
        self._check_all = True

    def observe(self, view: HnsView) -> None:
        """A fresh endpoint listing: our remote endpoints as HNS holds them."""
        self._remotes = {}
        for endpoint_id, endpoint in sorted(view.remotes.items()):
            remote = parse_remote(endpoint)
            if remote is not None:
                if remote.address in self._remotes:
                    self._remotes[f"{remote.address}#{endpoint_id}"] = (endpoint_id, remote)
                else:
                    self._remotes[remote.address] = (endpoint_id, remote)
        self._check_all = True

    def _log_notes(self, network: tuple[str, str] | None) -> None:
        """Each thing HNS cannot do as a service asks, once (the dump shows them all);
        services without a source VIP in one line, each time more of them arrive."""
        notes = set(self.wanted.notes())
        for note in sorted(notes - self._logged):
            if note.problem != NO_SOURCE_VIP:
                log.warning("%s", note)
        self._logged = notes
        stranded = {n.service for n in notes if n.problem == NO_SOURCE_VIP}
        if len(stranded) > self._stranded:
            self._say_no_source_vip(network, len(stranded))
        self._stranded = len(stranded)

    def _say_no_source_vip(self, network: tuple[str, str] | None, services: int) -> None:
        self._said_no_vip = True
        name, network_id = network or ("?", "?")
        # At start, before any service is stranded, a warning; then an error.
        log.log(
            logging.ERROR if services else logging.WARNING,
            "WindowsServiceSourceVIP is not set: the Overlay network %s (%s) needs it for"
            " service load balancers; %d service(s) not programmed",
            name,
            network_id,
            services,
        )

    def stranded(self) -> list[Note]:
        """Services not programmed for a reason the operator must fix (one note each)."""
        found: dict[str, Note] = {}
        for note in self.wanted.notes():
            if note.problem:
                found.setdefault(note.service, note)
        return [found[name] for name in sorted(found)]

    def awaits_local_endpoints(self) -> bool:
        """Is a local backend left out until the CNI's endpoint for it is listed?"""
        return bool(self._unlisted_local)

    def active(self) -> bool:
        return bool(self.wanted) or bool(self.owned) or bool(self._actual)

    # --- apply -------------------------------------------------------------------------

    async def apply(
        self, view: HnsView, options: LbOptions, version: HnsVersion, provider: Provider
    ) -> bool:
        """Make HNS hold the wanted load balancers; True if endpoints must be listed again."""
        self.again = False
        changes = self.wanted.take_changes(options)
        overlay = _overlay_name(view) if options.source_vip_required else None
        if self.wanted.rendered:  # notes change only when services are rendered
            self._log_notes(overlay)
        if overlay and not self._said_no_vip and not options.source_vips:
            self._say_no_source_vip(overlay, 0)  # at start, before any service arrives
        for key in changes.upserts.keys() | changes.deletes:
            self.held.release(key)  # a new value gets a fresh chance
            self._check.add(key)
        if not self.active():
            return False
        if self.must_list:
            await self._list()
            self._check_all = True
        if self.remotes_held.due():
            self._check_all = True  # to learn which load balancers still name them
        if self._check_all:
            self._check |= set(self.wanted.keys()) | set(self._actual)
            self._check_all = False
        self._check |= set(self.held.due())
        self._wanted_remotes = {}
        plans = self._plans(_service_network(view), view, provider)
        relist = await self._create_remotes(plans, view)
        await self._write_load_balancers(plans, version)
        relist = await self._delete_remotes(view) or relist
        for address in self.remotes_held.due():
            if address not in self._wanted_remotes:
                self.remotes_held.release(address)  # no longer wanted: nothing to retry
        self.owned.save()
        self._check = {k for k in self._check if k in self.held}
        return relist or self.must_list

    async def _list(self) -> None:
        """What HNS holds of ours, at a real host's cost: one enumerate, then a read
        only of ours not known (all at start; after a failed call, the ones it
        touched). Others' are never read: kube-proxy's, an operator's."""
        present = {str(i).upper() for i in await self._call(self._hcn.enumerate_load_balancers)}
        known = {lb_id: shape for lb_id, shape in self._actual.values()}
        listed: list[tuple[str, Shape | None]] = []
        for lb_id in sorted(present & set(self.owned)):
            shape = None if lb_id in self._stale else known.get(lb_id)
            if shape is None and lb_id not in self._extras:
                try:
                    shape = shape_of(await self._call(self._hcn.get_load_balancer, lb_id))
                except HcnError as exc:
                    if not exc.not_found:
                        raise
                    continue  # gone between the enumerate and the read
            listed.append((lb_id, shape))
        self._stale = set()
        self._adopt(listed)

    def _adopt(self, listed: list[tuple[str, Shape | None]]) -> None:
        """Ours as HNS holds them, by frontend (None: an extra); any other of ours is an
        extra to delete."""
        self._actual, extras = {}, set()
        for lb_id, shape in listed:
            if shape is None:
                extras.add(lb_id)
                continue
            key = key_of(shape)
            if key is None or key in self._actual:
                extras.add(lb_id)
            else:
                self._actual[key] = (lb_id, shape)
        self._extras = extras
        self.owned.keep_only({i for i, _ in self._actual.values()} | self._extras)
        self.must_list = False

    def _plans(
        self, network: tuple[str, bool] | None, view: HnsView, provider: Provider
    ) -> dict[LbKey, Plan]:
        plans: dict[LbKey, Plan] = {}
        due = set(self.held.due())
        for key in sorted(self._check):
            if key in self.held and key not in due:
                continue
            lb = self.wanted.get(key)
            plans[key] = self._plan(lb, network, view, provider) if lb else Plan(None, ())
            self.waiting.pop(key, None)
            self._unlisted_local.discard(key)
            if plans[key].waiting:
                self.waiting[key] = plans[key].waiting
            if plans[key].unlisted_local:
                self._unlisted_local.add(key)
        return plans

    def _plan(
        self, lb: WantedLb, network: tuple[str, bool] | None, view: HnsView, provider: Provider
    ) -> Plan:
        ids: list[str] = []
        remotes: list[RemoteEndpoint] = []
        waiting: list[str] = []
        unlisted_local = False
        for backend in lb.backends:
            local = view.by_address.get(backend.address)
            if local is not None:
                ids.append(local)
            elif backend.local:
                waiting.append(f"{backend.address} (its pod's HNS endpoint not found yet)")
                unlisted_local = True
            elif network is None:
                waiting.append(f"{backend.address} (no network of ours for remote endpoints)")
            else:
                network_id, overlay = network
                where = provider(backend.address, backend.node) if overlay else ""
                if overlay and not where:
                    waiting.append(f"{backend.address} (node {backend.node or '?'}: no VTEP yet)")
                    continue
                remotes.append(RemoteEndpoint(network_id, backend.address, where))
        due = set(self.remotes_held.due())
        for remote in remotes:
            have = self._remotes.get(remote.address)
            self._wanted_remotes[remote.address] = remote
            if have is not None and have[1] == remote:
                ids.append(have[0])
            elif have is not None:
                waiting.append(f"{remote.address} (its remote endpoint is being replaced)")
            elif remote.address in self.remotes_held and remote.address not in due:
                waiting.append(f"{remote.address} (its remote endpoint was refused)")
            else:
                ids.append(remote.id)  # created before any load balancer names it
        if not ids:
            return Plan(None, tuple(waiting), unlisted_local)
        lb_id = self._actual[lb.key][0] if lb.key in self._actual else ""
        return Plan(load_balancer_json(lb, lb_id, ids), tuple(waiting), unlisted_local)

    async def _write_load_balancers(self, plans: dict[LbKey, Plan], version: HnsVersion) -> None:
        deletes = [
            (k, i)
            for k, (i, _) in sorted(self._actual.items())
            if k in plans and plans[k].json is None
        ]
        updates, creates = [], []
        shapes: dict[LbKey, Shape] = {}
        for key, plan in sorted(plans.items()):
            if plan.json is None:
                if key not in self._actual:
                    self.held.release(key)  # nothing wanted, nothing held: nothing to retry
                continue
            have = self._actual.get(key)
            shapes[key] = shape_of(plan.json)
            if have is None:
                creates.append(key)
            elif have[1] != shapes[key]:
                updates.append(key)
            else:
                self.held.release(key)  # HNS holds it as wanted (adopted, or the call landed)
        in_place = version.supports("ModifyLoadbalancer")
        fresh = creates if in_place else [*updates, *creates]
        ids = {key: self._new_id() for key in fresh}
        self.owned.add(ids.values())
        self.owned.save()  # before the creates: a crash cannot leave one untracked
        for lb_id in sorted(self._extras):
            if await self._delete(None, lb_id):
                self._extras.discard(lb_id)
        for key, lb_id in deletes:
            await self._delete(key, lb_id)
        for key in updates:
            if in_place:
                await self._modify(key, plans[key].json or {}, shapes[key])
            elif await self._delete(key, self._actual[key][0]):
                await self._create(key, ids[key], plans[key].json or {}, shapes[key])
        for key in creates:
            await self._create(key, ids[key], plans[key].json or {}, shapes[key])

    async def _delete(self, key: LbKey | None, lb_id: str) -> bool:
        try:
            await self._call(self._hcn.delete_load_balancer, lb_id)
        except HcnError as exc:
            if not exc.not_found:
                self._failed(key, lb_id, exc)
                return False
        self.owned.discard([lb_id])
        if key is not None:
            self._actual.pop(key, None)
            self.held.release(key)
        return True

    async def _modify(self, key: LbKey, json: Json, shape: Shape) -> None:
        lb_id = self._actual[key][0]
        try:
            await self._call(self._hcn.modify_load_balancer, lb_id, {**json, "ID": lb_id})
        except HcnError as exc:
            if exc.not_found:
                self._actual.pop(key, None)  # gone behind our back: created again
                self._check.add(key)
                self.must_list = True
            else:
                self._failed(key, lb_id, exc)
            return
        self._actual[key] = (lb_id, shape)
        self.held.release(key)

    async def _create(self, key: LbKey, lb_id: str, json: Json, shape: Shape) -> None:
        try:
            await self._call(self._hcn.create_load_balancer, {**json, "ID": lb_id})
        except HcnError as exc:
            # Its id stays ours: HNS may have made it after all; the next listing says.
            self._failed(key, lb_id, exc)
            return
        self._actual[key] = (lb_id, shape)
        self.held.release(key)

    def _failed(self, key: LbKey | None, lb_id: str, exc: HcnError) -> None:
        self.must_list = True  # the call may have happened: learn what HNS holds
        self._stale.add(lb_id)
        if key is not None and self.held.reject(key, str(exc)):
            log.error("load balancer %s: HNS failed it: %s; retried with backoff", key, exc)
        elif key is None:
            log.error("load balancer %s: could not delete it: %s", lb_id, exc)

    # --- reporting -----------------------------------------------------------------------

    def quarantined(self) -> list[tuple[str, Rejection]]:
        return [
            *((f"load balancer {key}", why) for key, why in self.held.items()),
            *((f"remote endpoint {address}", why) for address, why in self.remotes_held.items()),
        ]

    def dump(self) -> list[str]:
        out = []
        for name, rendered in sorted(self.wanted.by_service().items()):
            out.append(f"service {name}: {len(rendered.balancers)} load balancer(s)")
            for lb in rendered.balancers:
                have = self._actual.get(lb.key)
                where = f"HNS {have[0]}, {len(have[1][2])} endpoint(s)" if have else "not in HNS"
                held = self.held.get(lb.key)
                if held is not None:
                    where += f"; refused {held.failures} time(s): {held.reason}"
                out.append(f"  {lb.key} -> port {lb.internal_port}: {where}")
                out.extend(f"    waiting: {w}" for w in self.waiting.get(lb.key, ()))
        out.extend(f"  {note}" for note in self.wanted.notes())
        out.append(f"remote endpoints of ours: {len(self._remotes)}")
        return out


def lb_options(
    config: Config, version: HnsVersion, families: tuple[int, ...], view: HnsView
) -> LbOptions:
    """What this node's configuration and HNS allow its load balancers."""
    network = _service_network(view)
    return LbOptions(
        source_vips=config.windows_source_vips,
        dsr=config.windows_dsr,
        dsr_supported=version.supports("DSR"),
        affinity_supported=version.supports("SessionAffinity"),
        families=families,
        source_vip_required=network is not None and network[1],  # an Overlay network
    )


def _overlay_name(view: HnsView) -> tuple[str, str] | None:
    """Our Overlay network's name and id, if we have one."""
    network = _service_network(view)
    if network is None or not network[1]:
        return None
    return str(view.networks[network[0]].get("Name", "")), network[0]


def _service_network(view: HnsView) -> tuple[str, bool] | None:
    """The network remote endpoints go on: our Overlay network if any, else our first."""
    networks = sorted(view.networks.items())
    for network_id, network in networks:
        if str(network.get("Type", "")).lower() == "overlay":
            return network_id, True
    return (networks[0][0], False) if networks else None
