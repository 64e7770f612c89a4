"""The Windows programmers: the only code that writes ACLs and sets to HNS.

:class:`EndpointProgrammer` keeps each workload's rendered ACL list and
replaces an HNS endpoint's list in one ``ModifyEndpoint`` when, and only
when, HNS holds something else. :class:`SetProgrammer` keeps each of our
networks' ``SetPolicy`` objects equal to the desired IP sets with one
``ModifyNetwork`` per request type.

What HNS refuses is quarantined, as on Linux: the object is set aside and
retried alone with backoff (1 s doubling to 5 min), everything else is
still written, and the apply succeeds, so one endpoint HNS will not take
never stalls the node. A refused endpoint keeps the ACLs it holds (its last
good list); one that holds none would be wide open (HNS allows everything
on an endpoint without ACLs), so it gets the fail-closed list instead:
everything blocked but the host's own traffic.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from dataplane.core.quarantine import Quarantine
from dataplane.windows.hns.acl import AclRule
from dataplane.windows.hns.calls import CallHcn
from dataplane.windows.hns.hcn import HCN, HcnError, Json
from dataplane.windows.policy.acl_policy import Acl
from dataplane.windows.policy.endpoint_render import EndpointAcls
from dataplane.windows.policy.set_policy import WantedSets, set_policy_changes
from dataplane.windows.view.hns_view import HnsEndpoint, HnsView, acl_key

__all__ = [
    "EndpointProgrammer",
    "Refusal",
    "SetProgrammer",
    "log_refusals",
    "policy_request",
]

log = logging.getLogger(__name__)

K = TypeVar("K")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Refusal(Generic[K]):
    """HNS refused an object's write; ``kept`` says what is in force instead."""

    key: K
    message: str
    kept: str


def log_refusals(endpoints: Iterable[Refusal[Any]], networks: Iterable[Refusal[str]]) -> None:
    """One line per object newly quarantined, saying what is in force instead."""
    for refusal in endpoints:
        log.error(
            "workload %s: HNS refused its ACLs: %s; quarantined, %s",
            refusal.key,
            refusal.message,
            refusal.kept,
        )
    for refused in networks:
        log.error(
            "network %s: HNS refused its IP sets: %s; quarantined, %s",
            refused.key,
            refused.message,
            refused.kept,
        )


def policy_request(kind: str, policies: list[Json]) -> Json:
    """A ``ModifySettingRequest`` as hcsshim nests it: ResourceType Policy, its policies."""
    return {"ResourceType": "Policy", "RequestType": kind, "Settings": {"Policies": policies}}


def _acl_request(acls: tuple[Acl, ...]) -> Json:
    # Update replaces the endpoint's whole list: one call whatever changed.
    return policy_request("Update", [a.policy() for a in acls])


class EndpointProgrammer(Generic[K]):
    """Rendered ACL lists by workload, and the writes that put them in HNS."""

    def __init__(self, hcn: HCN, call: CallHcn, clock: Callable[[], float]) -> None:
        self._hcn = hcn
        self._call = call
        self._rendered: dict[K, EndpointAcls] = {}
        self._keys: dict[K, Counter[AclRule]] = {}
        self.pending: set[K] = set()  # rendered, not known to be in HNS
        self.held: Quarantine[K] = Quarantine(clock)
        self._refusals: list[Refusal[K]] = []

    def want(self, key: K, rendered: EndpointAcls) -> None:
        if self._rendered.get(key) == rendered:
            return
        self._rendered[key] = rendered
        # Read as HNS's copy is read, so the two compare like for like.
        self._keys[key] = acl_key([a.policy() for a in rendered.acls])
        self.pending.add(key)
        self.held.release(key)  # a new value gets a fresh chance

    def forget(self, key: K) -> None:
        # HNS drops an endpoint's ACLs with the endpoint; the CNI deletes it.
        self._rendered.pop(key, None)
        self._keys.pop(key, None)
        self.pending.discard(key)
        self.held.release(key)

    def rendered(self, key: K) -> EndpointAcls | None:
        return self._rendered.get(key)

    def all_rendered(self) -> list[EndpointAcls]:
        return list(self._rendered.values())

    def write_for(self, key: K) -> tuple[Json, Counter[AclRule]] | None:
        """The request that writes ``key``'s rendered ACLs, and those ACLs as HNS reads them."""
        rendered = self._rendered.get(key)
        if rendered is None:
            return None
        return _acl_request(rendered.acls), self._keys[key]

    def mapped(self, find: Callable[[K], HnsEndpoint | None]) -> list[str]:
        """The HNS ids of the endpoints whose ACLs we keep (the refresh re-reads them)."""
        found = (find(key) for key in self._rendered)
        return [endpoint.id for endpoint in found if endpoint is not None]

    def recheck_all(self) -> None:
        """After a fresh listing: what HNS holds now decides which need a write."""
        self.pending = set(self._rendered)

    def take_refusals(self) -> list[Refusal[K]]:
        refusals, self._refusals = self._refusals, []
        return refusals

    async def apply(
        self,
        view: HnsView,
        find: Callable[[K], HnsEndpoint | None],
        fail_closed: EndpointAcls,
    ) -> bool:
        """Write every pending endpoint not held back; True if HNS must be listed again."""
        due = set(self.held.due())
        relist = False
        for key in sorted(self.pending, key=str):
            if key in self.held and key not in due:
                continue
            endpoint = find(key)
            if endpoint is None:
                continue  # not created by the CNI yet; looked for again later
            wanted = self._keys[key]
            if endpoint.acls != wanted:
                try:
                    await self._call(
                        self._hcn.modify_endpoint,
                        endpoint.id,
                        _acl_request(self._rendered[key].acls),
                    )
                except HcnError as exc:
                    if exc.not_found:  # deleted behind our back
                        view.forget(endpoint.id)
                        relist = True
                    else:
                        await self._refused(key, endpoint, exc, fail_closed)
                    continue
                endpoint.acls = Counter(wanted)
            self.pending.discard(key)  # written, or HNS already holds it: adopted
            self.held.release(key)
        return relist

    def dump(self, keys: Iterable[K], find: Callable[[K], HnsEndpoint | None]) -> list[str]:
        """Per workload: its HNS endpoint, refusals, and the ACLs rendered for it."""
        out = []
        for key in keys:
            found = find(key)
            where = f"HNS endpoint {found.id}" if found else "no HNS endpoint yet"
            held = self.held.get(key)
            if held is not None:
                where += f"; refused {held.failures} time(s), retried with backoff: {held.reason}"
            out.append(f"workload {key}: {where}")
            rendered = self._rendered.get(key)
            out.extend(f"  {acl}" for acl in (rendered.acls if rendered else ()))
        return out

    async def _refused(
        self, key: K, endpoint: HnsEndpoint, exc: HcnError, fail_closed: EndpointAcls
    ) -> None:
        kept = "it keeps the ACLs it holds"
        if not endpoint.acls:
            # No ACL at all: HNS lets everything through. Close it.
            try:
                await self._call(
                    self._hcn.modify_endpoint, endpoint.id, _acl_request(fail_closed.acls)
                )
            except HcnError as again:
                kept = f"it stays open: the fail-closed list was refused too ({again})"
            else:
                endpoint.acls = acl_key([a.policy() for a in fail_closed.acls])
                kept = "it fails closed (all but the host's traffic blocked)"
        if self.held.reject(key, str(exc)):
            self._refusals.append(Refusal(key, str(exc), kept))


class SetProgrammer:
    """Our ``SetPolicy`` objects on each of our networks, equal to the desired sets."""

    def __init__(self, hcn: HCN, call: CallHcn, clock: Callable[[], float]) -> None:
        self._hcn = hcn
        self._call = call
        self.held: Quarantine[str] = Quarantine(clock)  # network ids
        self.failed_sets: dict[str, frozenset[str]] = {}  # network id -> set ids not written
        self._refusals: list[Refusal[str]] = []

    def release_all(self) -> None:
        """The desired sets changed: every held network gets a fresh chance."""
        for network_id in list(self.held):
            self.held.release(network_id)

    def take_refusals(self) -> list[Refusal[str]]:
        refusals, self._refusals = self._refusals, []
        return refusals

    async def apply(self, view: HnsView, wanted: WantedSets, *, removals: bool) -> None:
        """Add and update the wanted sets on every network or, with ``removals``, remove ours
        no longer wanted (once no ACL names them)."""
        due = set(self.held.due())
        for network_id, network in view.networks.items():
            if network_id in self.held and network_id not in due:
                continue
            if await self._write(network_id, network, wanted, removals) and removals:
                self.failed_sets.pop(network_id, None)
                self.held.release(network_id)

    def dump(self, view: HnsView) -> list[str]:
        out = []
        for network_id, network in sorted(view.networks.items()):
            sets = [p for p in network.get("Policies") or () if p.get("Type") == "SetPolicy"]
            held = self.held.get(network_id)
            refused = f"; set writes refused: {held.reason}" if held else ""
            out.append(f"network {network.get('Name')} {network_id}: {len(sets)} set(s){refused}")
        return out

    async def _write(
        self, network_id: str, network: Json, wanted: WantedSets, removals: bool
    ) -> bool:
        for kind, policies in set_policy_changes(network, wanted.policies).items():
            if (kind == "Remove") != removals:
                continue
            try:
                await self._call(
                    self._hcn.modify_network, network_id, policy_request(kind, policies)
                )
            except HcnError as exc:
                tokens = {p["Settings"]["Id"] for p in policies}
                owners = wanted.owners
                self.failed_sets[network_id] = frozenset(owners[t] for t in tokens if t in owners)
                if self.held.reject(network_id, str(exc)):
                    kept = "it keeps the sets it holds"
                    self._refusals.append(Refusal(network_id, str(exc), kept))
                return False
            network["Policies"] = _merged_sets(network.get("Policies") or [], kind, policies)
        return True


def _merged_sets(current: list[Json], kind: str, policies: list[Json]) -> list[Json]:
    """The network's policies after a successful set request (as HNS merges them)."""
    ids = {p["Settings"]["Id"] for p in policies}
    kept = [
        p
        for p in current
        if p.get("Type") != "SetPolicy" or (p.get("Settings") or {}).get("Id") not in ids
    ]
    return kept if kind == "Remove" else [*kept, *policies]
