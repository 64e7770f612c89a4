"""WorkloadWriter: each workload's to/from chains and the dispatch trees.

An endpoint's chains are rendered from its effective policy, which the
managers resolved; only the dispatch trees change shape when endpoints come
and go. On nftables the chains are shared by every endpoint with the same
policy and dispatch is by verdict maps, so an endpoint is mostly elements
(:mod:`dataplane.linux.render.shared_workloads`).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Collection, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, cast

from dataplane.linux.render.filter import FilterRenderer
from dataplane.linux.render.qos_rules import packet_rate_chains
from dataplane.linux.render.shared_workloads import (
    FROM_MAP,
    SOURCES,
    TO_MAP,
    SerialisedRules,
    map_dispatch,
    shared_workload_chains,
)
from dataplane.linux.rules.chain import Chain
from dataplane.linux.shaping.buckets import Shaping
from dataplane.linux.writers.target import R, Target
from dataplane.model import EffectivePolicy, WorkloadEndpoint, WorkloadEndpointKey

if TYPE_CHECKING:
    from dataplane.linux.nftables.serialise import NftRule
    from dataplane.linux.nftables.view import NftTableView

__all__ = ["WorkloadWriter"]


def _shared_view(table: object) -> NftTableView | None:
    """``table`` as an nftables view keeping per-interface data, else None.

    Looked up, not imported: a node on iptables never loads nftables'
    modules, and no table can be a view whose module is not loaded.
    """
    view = sys.modules.get("dataplane.linux.nftables.view")
    if view is None or not isinstance(table, view.NftTableView):
        return None
    nft = cast("NftTableView", table)
    return nft if nft.has_data else None


def _rates(endpoint: WorkloadEndpoint | None) -> object:
    """What of ``endpoint`` its packet-rate rules depend on (None: it has none)."""
    if endpoint is None:
        return None
    qos = endpoint.qos
    if qos.ingress.packet_rate is None and qos.egress.packet_rate is None:
        return None
    return endpoint.name, endpoint.admin_up, qos.ingress.packet_rate, qos.egress.packet_rate


class WorkloadWriter:
    def __init__(self) -> None:
        self._endpoints: dict[WorkloadEndpointKey, tuple[WorkloadEndpoint, EffectivePolicy]] = {}
        self._dirty: set[WorkloadEndpointKey] = set()
        self._removed_ifaces: set[str] = set()
        self._dispatch_dirty = True
        self._rates_dirty = True  # an endpoint's packet-rate limit changed
        self._shaping: dict[str, Shaping] = {}  # interface -> its bandwidth limits
        self._dispatch_chains: dict[int, set[str]] = {}
        # nftables: the shared (to, from) chains each interface reaches, and
        # the shared chains in the table, per version.
        self._reaches: dict[int, dict[str, tuple[str, str]]] = {}
        # How many interfaces reach each shared chain, per version: a chain
        # no interface reaches any more goes (counted, not found by a walk
        # over every interface at each write).
        self._reached: dict[int, Counter[str]] = {}
        self._ifaces: Counter[str] = Counter()  # interface -> its endpoints (one, normally)
        # nftables: the shared chains' rules serialised so far, per version
        # (made again when the renderer is: a new config, a new serialiser).
        self._serialised: dict[int, SerialisedRules[Any]] = {}

    def __iter__(self) -> Iterator[tuple[WorkloadEndpointKey, WorkloadEndpoint]]:
        for key, (endpoint, _) in self._endpoints.items():
            yield key, endpoint

    def get(self, key: WorkloadEndpointKey) -> WorkloadEndpoint | None:
        entry = self._endpoints.get(key)
        return entry[0] if entry else None

    def sharing(self, version: int, chain: str) -> frozenset[WorkloadEndpointKey]:
        """The endpoints whose interface reaches shared chain ``chain``
        (nftables; none on iptables, where each endpoint has its own)."""
        reaches = self._reaches.get(version, {})
        return frozenset(
            key
            for key, (endpoint, _) in self._endpoints.items()
            if chain in reaches.get(endpoint.name, ())
        )

    def set(self, endpoint: WorkloadEndpoint, policy: EffectivePolicy) -> None:
        old = self.get(endpoint.key)
        self._endpoints[endpoint.key] = (endpoint, policy)
        self._dirty.add(endpoint.key)
        if _rates(old) != _rates(endpoint):
            self._rates_dirty = True
        if old is not None and old.name != endpoint.name:
            self._shaping.pop(old.name, None)
        qos = endpoint.qos
        self._shaping[endpoint.name] = Shaping(qos.ingress.bandwidth, qos.egress.bandwidth)
        if old is None or old.name != endpoint.name:
            self._dispatch_dirty = True  # the set of interfaces changed
            self._ifaces[endpoint.name] += 1
        if old is not None and old.name != endpoint.name:
            self._removed_ifaces.add(old.name)
            self._unuse(old.name)

    def remove(self, key: WorkloadEndpointKey) -> None:
        old = self._endpoints.pop(key, None)
        if old is not None:
            self._removed_ifaces.add(old[0].name)
            self._unuse(old[0].name)
            self._dispatch_dirty = True
            self._rates_dirty |= _rates(old[0]) is not None
            self._shaping.pop(old[0].name, None)

    def _unuse(self, iface: str) -> None:
        self._ifaces[iface] -= 1
        if not self._ifaces[iface]:
            del self._ifaces[iface]

    def shaping(self) -> Mapping[str, Shaping]:
        """Every workload interface's bandwidth limits (the shaping programmer's plan)."""
        return self._shaping

    def write(self, target: Target[R], everything: bool) -> None:
        in_use = self._ifaces.keys()
        gone = {iface for iface in self._removed_ifaces if iface not in in_use}
        dirty = set(self._endpoints) if everything else self._dirty
        names = target.names
        for version in target.versions:
            table = target.table("filter", version)
            render = target.renderer("filter", version)
            if everything or self._rates_dirty:
                endpoints = (endpoint for endpoint, _ in self._endpoints.values())
                for chain in packet_rate_chains(names, render.out, endpoints):
                    table.update_chain(chain)
            shared = _shared_view(table)
            if shared is not None:
                self._write_shared(shared, render, version, dirty, gone, everything=everything)
                continue
            for iface in gone:
                table.remove_chain(names.to_workload(iface))
                table.remove_chain(names.from_workload(iface))
            for key in dirty:
                entry = self._endpoints.get(key)
                if entry is not None:
                    for chain in render.workload_chains(*entry):
                        table.update_chain(chain)
            if everything or self._dispatch_dirty:
                dispatch = render.dispatch.workloads(in_use)
                for chain in dispatch:
                    table.update_chain(chain)
                chains = {c.name for c in dispatch}
                for stale in self._dispatch_chains.get(version, set()) - chains:
                    table.remove_chain(stale)
                self._dispatch_chains[version] = chains
        self._dirty.clear()
        self._removed_ifaces.clear()
        self._dispatch_dirty = self._rates_dirty = False

    def _write_shared(
        self,
        table: NftTableView,
        render: FilterRenderer[R],
        version: int,
        dirty: Collection[WorkloadEndpointKey],
        gone: AbstractSet[str],
        *,
        everything: bool,
    ) -> None:
        """nftables: shared chains, and each interface's map and set elements."""
        # Imported here: a node on iptables never loads nftables' modules.
        from dataplane.linux.nftables.iface_data import DataSet  # noqa: PLC0415
        from dataplane.linux.nftables.set_elements import interface_ranges  # noqa: PLC0415

        address = "ipv4_addr" if version == 4 else "ipv6_addr"
        table.declare(DataSet(FROM_MAP, "type ifname : verdict"))
        table.declare(DataSet(TO_MAP, "type ifname : verdict"))
        table.declare(DataSet(SOURCES, f"type ifname . {address}; flags interval"))
        serialised = self._serialised.get(version)
        if serialised is None or serialised.out is not render.out:
            serialised = self._serialised[version] = SerialisedRules(render.out)
        reaches = self._reaches.setdefault(version, {})
        reached = self._reached.setdefault(version, Counter())
        unreached: set[str] = set()

        def reach(iface: str, chains: tuple[str, str] | None) -> None:
            old = reaches.pop(iface, None)
            if old is not None:
                reached.subtract(old)
                unreached.update(old)
            if chains is not None:
                reaches[iface] = chains
                reached.update(chains)

        for iface in gone:
            reach(iface, None)
            table.put_goto(FROM_MAP, iface, None)
            table.put_goto(TO_MAP, iface, None)
            table.put_elements(SOURCES, iface, frozenset())
        for key in dirty:
            entry = self._endpoints.get(key)
            if entry is None:
                continue
            endpoint = entry[0]
            to_chain, from_chain = shared_workload_chains(render, *entry, serialised)
            table.update_chain(cast("Chain[NftRule]", to_chain))
            table.update_chain(cast("Chain[NftRule]", from_chain))
            reach(endpoint.name, (to_chain.name, from_chain.name))
            table.put_goto(TO_MAP, endpoint.name, to_chain.name)
            table.put_goto(FROM_MAP, endpoint.name, from_chain.name)
            sources = render.allowed_sources(endpoint)
            table.put_elements(
                SOURCES, endpoint.name, interface_ranges(endpoint.name, sources, version)
            )
        if everything or version not in self._dispatch_chains:
            dispatch = map_dispatch(render)
            for chain in dispatch:
                table.update_chain(cast("Chain[NftRule]", chain))
            self._dispatch_chains[version] = {c.name for c in dispatch}
        for name in sorted(unreached):
            if reached[name] <= 0:
                del reached[name]
                table.remove_chain(name)
