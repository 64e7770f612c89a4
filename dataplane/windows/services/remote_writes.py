"""The remote endpoints our load balancers name, created and deleted in HNS.

On an overlay network a backend on another node is a remote endpoint of
ours (its address, the provider address its node's VXLAN packets go to);
one is created, through one network handle per network, before any load
balancer names it, and deleted once none wants or names it. One HNS
refuses is quarantined, and no load balancer names it meanwhile.

A mixin over :class:`~dataplane.windows.services.lb_programmer.LbProgrammer`'s state.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from dataplane.core.quarantine import Quarantine
from dataplane.windows.hns.calls import CallHcn
from dataplane.windows.hns.hcn import HCN, HcnError, Json
from dataplane.windows.services.lb_render import LbKey
from dataplane.windows.services.lb_shape import Shape
from dataplane.windows.services.remote_endpoints import RemoteEndpoint
from dataplane.windows.view.hns_view import HnsView

__all__ = ["Plan", "RemoteWrites", "drop_endpoint"]

log = logging.getLogger("dataplane.windows.services.lb_programmer")


@dataclass(slots=True)
class Plan:
    """One load balancer's wanted JSON (None: none wanted) and why backends are missing."""

    json: Json | None
    waiting: tuple[str, ...]
    unlisted_local: bool = False  # a local backend's endpoint is not in the listing yet


def drop_endpoint(plans: dict[LbKey, Plan], endpoint_id: str) -> None:
    """A remote endpoint could not be created: no load balancer may name it."""
    for plan in plans.values():
        if plan.json is not None and endpoint_id in plan.json["HostComputeEndpoints"]:
            remaining = [e for e in plan.json["HostComputeEndpoints"] if e != endpoint_id]
            plan.json = {**plan.json, "HostComputeEndpoints": remaining} if remaining else None


class RemoteWrites:
    """The remote endpoint methods of
    :class:`~dataplane.windows.services.lb_programmer.LbProgrammer`."""

    _hcn: HCN
    _call: CallHcn
    _actual: dict[LbKey, tuple[str, Shape]]
    _remotes: dict[str, tuple[str, RemoteEndpoint]]
    _wanted_remotes: dict[str, RemoteEndpoint]
    remotes_held: Quarantine[str]
    again: bool
    _check_all: bool

    async def _create_remotes(self, plans: dict[LbKey, Plan], view: HnsView) -> bool:
        """Create the wanted remote endpoints HNS lacks, through one network handle."""
        relist = False
        due = set(self.remotes_held.due())
        todo: dict[str, list[RemoteEndpoint]] = {}
        for address, remote in sorted(self._wanted_remotes.items()):
            if address in self._remotes:
                if self._remotes[address][1] == remote:
                    self.remotes_held.release(address)  # HNS holds it (the call landed after all)
                continue
            if address in self.remotes_held and address not in due:
                continue
            todo.setdefault(remote.network_id, []).append(remote)
        for network_id, remotes in sorted(todo.items()):
            results: list[Json | HcnError]
            try:
                results = await self._call(
                    self._hcn.create_endpoints, network_id, [r.json() for r in remotes]
                )
            except HcnError as exc:  # the network itself could not be opened
                results = [exc] * len(remotes)
            for remote, result in zip(remotes, results, strict=True):
                if isinstance(result, HcnError):
                    relist = True
                    if self.remotes_held.reject(remote.address, str(result)):
                        log.error(
                            "remote endpoint %s: HNS failed it: %s; retried with backoff",
                            remote.address,
                            result,
                        )
                    drop_endpoint(plans, remote.id)
                    continue
                self.remotes_held.release(remote.address)
                self._remotes[remote.address] = (remote.id, remote)
                view.add(result)  # known without reading it back
        return relist

    async def _delete_remotes(self, view: HnsView) -> bool:
        named = {e for _, shape in self._actual.values() for e in shape[2]}
        relist = False
        for address, (endpoint_id, remote) in sorted(self._remotes.items()):
            if self._wanted_remotes.get(address) == remote or endpoint_id in named:
                continue
            try:
                await self._call(self._hcn.delete_endpoint, endpoint_id)
            except HcnError as exc:
                if not exc.not_found:
                    relist = True
                    log.error("remote endpoint %s: could not delete it: %s", address, exc)
                    continue
            del self._remotes[address]
            view.forget(endpoint_id)
            if address in self._wanted_remotes:
                self.again = self._check_all = True  # replaced: the new one is made next
        return relist
