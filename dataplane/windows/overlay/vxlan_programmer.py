"""VxlanProgrammer: our overlay networks' ``RemoteSubnetRoute`` policies, equal to the desired.

It keeps the VTEPs and routes the managers hand over, renders the wanted
routes (:mod:`dataplane.windows.overlay.vxlan_render`) and, on each of our networks
of type ``Overlay``, issues one ``ModifyNetwork`` per difference: a
``Remove`` of a listed route we do not want (sent exactly as HNS listed it,
since HNS removes a policy by value), then an ``Add`` of a wanted one it
lacks. Removals go first, as in Felix, so a route whose VTEP moved is never
held twice. A restart finds every wanted route listed and makes no call.

A write HNS refuses quarantines that destination on that network
(``(network id, prefix)``): it is retried alone with backoff and logged
once, everything else is written and the apply succeeds. If the removal of
a prefix's old route is refused, its new route waits for it. A new desired
value for a destination (its route, or its node's VTEP) gives it a fresh
chance.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable

from dataplane.core.quarantine import Quarantine, Rejection
from dataplane.model.routes import Route, Vtep
from dataplane.windows.hns.calls import CallHcn
from dataplane.windows.hns.hcn import HCN, HCN_E_POLICY_NOT_FOUND, HcnError, Json
from dataplane.windows.overlay.vxlan_render import (
    SubnetRoute,
    parse_route,
    prefix_of,
    render_routes,
    route_changes,
    vni_problem,
)
from dataplane.windows.policy.programmers import policy_request
from dataplane.windows.view.hns_view import HnsView

__all__ = ["VxlanProgrammer"]

log = logging.getLogger(__name__)

RouteKey = tuple[str, str]  # (network id, destination prefix)


def overlay_networks(view: HnsView) -> dict[str, Json]:
    """Our networks that carry VXLAN routes (Felix: only an ``Overlay`` network may)."""
    return {
        network_id: network
        for network_id, network in sorted(view.networks.items())
        if str(network.get("Type", "")).lower() == "overlay"
    }


class VxlanProgrammer:
    def __init__(self, hcn: HCN, call: CallHcn, clock: Callable[[], float]) -> None:
        self._hcn = hcn
        self._call = call
        self._vteps: dict[str, Vtep] = {}
        self._routes: dict[str, Route] = {}
        self._dirty = True
        self.held: Quarantine[RouteKey] = Quarantine(clock)
        self._warned: set[str] = set()
        self.wanted: frozenset[SubnetRoute] = frozenset()

    # --- desired state (the platform's RoutesSink forwards here) ------------------

    def set_vtep(self, vtep: Vtep) -> None:
        self._vteps[vtep.node] = vtep
        self._changed(self._via(vtep.node))

    def remove_vtep(self, node: str) -> None:
        self._vteps.pop(node, None)
        self._changed(self._via(node))

    def set_route(self, route: Route) -> None:
        self._routes[route.dst] = route
        self._changed({route.dst})

    def remove_route(self, dst: str) -> None:
        self._routes.pop(dst, None)
        self._changed({dst})

    def provider(self, address: str, node: str) -> str:
        """The address VXLAN packets for ``address`` (a pod on ``node``) go to; "" if unknown.

        The node's VTEP gives it; without a node name, the route whose
        block holds the address names the node.
        """
        if not node:
            ip = ipaddress.ip_address(address)
            holding = [
                r
                for r in self._routes.values()
                if r.dst_node_name and ip in ipaddress.ip_network(r.dst)
            ]
            if not holding:
                return ""
            node = max(holding, key=lambda r: ipaddress.ip_network(r.dst).prefixlen).dst_node_name
        vtep = self._vteps.get(node)
        if vtep is None:
            return ""
        family = vtep.v6 if ":" in address and vtep.v6 is not None else vtep.v4
        return family.parent_address if family is not None else ""

    def _via(self, node: str) -> set[str]:
        return {r.dst for r in self._routes.values() if r.dst_node_name == node}

    def _changed(self, prefixes: set[str]) -> None:
        self._dirty = True
        for key in self.held:  # a new desired value gets a fresh chance
            if key[1] in prefixes:
                self.held.release(key)

    def touch(self) -> None:
        """Compare again at the next apply (a fresh listing, a new configuration)."""
        self._dirty = True

    # --- apply ------------------------------------------------------------------------

    def _warn_once(self, text: str) -> None:
        if text not in self._warned:
            self._warned.add(text)
            log.warning("%s", text)

    async def apply(self, view: HnsView, vni: int, own_node: str) -> bool:
        """Make our overlay networks hold the wanted routes; True if HNS must be listed again."""
        due = set(self.held.due())
        if not (self._dirty or due):
            return False
        self._dirty = False
        problem = vni_problem(vni)
        if problem is not None:
            # Rendering with a VNI HNS cannot take would only churn: leave
            # what the network holds until the configuration is fixed.
            if self._routes:
                self._warn_once(f"{problem}: VXLAN routes left as they are")
            return False
        self.wanted = render_routes(self._vteps, self._routes.values(), vni, own_node)
        networks = overlay_networks(view)
        if self.wanted and not networks:
            self._warn_once("VXLAN routes wanted but none of our HNS networks is an Overlay")
        relist = False
        for network_id, network in networks.items():
            try:
                await self._network(network_id, network, due)
            except HcnError as exc:  # only "not found" comes out: the network is gone
                log.info("network %s gone (%s); listing HNS again", network_id, exc)
                relist = True
        return relist

    async def _network(self, network_id: str, network: Json, due: set[RouteKey]) -> None:
        removes, adds = route_changes(network, self.wanted)
        differing = {prefix_of(p) for p in removes} | {r.destination_prefix for r in adds}
        for key in self.held:  # converged meanwhile (desired or HNS changed)
            if key[0] == network_id and key[1] not in differing:
                self.held.release(key)
        blocked: set[str] = set()
        for policy in removes:
            prefix = prefix_of(policy)
            if await self._write(network_id, "Remove", policy, due):
                network["Policies"] = [p for p in network.get("Policies") or () if p is not policy]
            else:
                blocked.add(prefix)
        for route in adds:
            if route.destination_prefix in blocked:
                continue  # its old route is still there: the new one waits for it
            policy = route.policy()
            if await self._write(network_id, "Add", policy, due):
                network["Policies"] = [*(network.get("Policies") or ()), policy]

    async def _write(self, network_id: str, kind: str, policy: Json, due: set[RouteKey]) -> bool:
        """One ModifyNetwork; False if it is held back or HNS refused it (then quarantined)."""
        key = (network_id, prefix_of(policy))
        if key in self.held and key not in due:
            return False
        try:
            await self._call(self._hcn.modify_network, network_id, policy_request(kind, [policy]))
        except HcnError as exc:
            if exc.not_found:
                raise
            if kind == "Remove" and exc.hresult == HCN_E_POLICY_NOT_FOUND:
                self.held.release(key)
                return True  # someone removed it first: as good as done
            if self.held.reject(key, str(exc)):
                found = parse_route(policy)
                what = str(found) if found is not None else repr(policy.get("Settings"))
                log.error(
                    "network %s: HNS refused to %s VXLAN route %s: %s; quarantined",
                    network_id,
                    kind.lower(),
                    what,
                    exc,
                )
            return False
        self.held.release(key)
        return True

    # --- reporting ----------------------------------------------------------------------

    def quarantined(self) -> list[tuple[str, Rejection]]:
        return [
            (f"route {prefix} on network {net}", why) for (net, prefix), why in self.held.items()
        ]

    def dump(self, view: HnsView) -> list[str]:
        out = []
        for network_id, network in overlay_networks(view).items():
            listed = [
                p for p in network.get("Policies") or () if p.get("Type") == "RemoteSubnetRoute"
            ]
            out.append(
                f"overlay network {network.get('Name')} {network_id}: {len(listed)} route(s)"
            )
            out.extend(f"  {parse_route(p) or p.get('Settings')}" for p in listed)
        held = [
            f"  route {prefix}: refused, retried with backoff: {why.reason}"
            for (_, prefix), why in self.held.items()
        ]
        return out + held
