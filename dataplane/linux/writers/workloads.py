"""WorkloadWriter: each workload's to/from chains and the dispatch trees.

An endpoint's chains are rendered from its effective policy, which the
managers resolved; only the dispatch trees change shape when endpoints come
and go.
"""

from __future__ import annotations

from collections.abc import Iterator

from dataplane.linux.writers.target import R, Target
from dataplane.model import EffectivePolicy, WorkloadEndpoint, WorkloadEndpointKey

__all__ = ["WorkloadWriter"]


class WorkloadWriter:
    def __init__(self) -> None:
        self._endpoints: dict[WorkloadEndpointKey, tuple[WorkloadEndpoint, EffectivePolicy]] = {}
        self._dirty: set[WorkloadEndpointKey] = set()
        self._removed_ifaces: set[str] = set()
        self._dispatch_dirty = True
        self._dispatch_chains: dict[int, set[str]] = {}

    def __iter__(self) -> Iterator[tuple[WorkloadEndpointKey, WorkloadEndpoint]]:
        for key, (endpoint, _) in self._endpoints.items():
            yield key, endpoint

    def get(self, key: WorkloadEndpointKey) -> WorkloadEndpoint | None:
        entry = self._endpoints.get(key)
        return entry[0] if entry else None

    def set(self, endpoint: WorkloadEndpoint, policy: EffectivePolicy) -> None:
        old = self.get(endpoint.key)
        self._endpoints[endpoint.key] = (endpoint, policy)
        self._dirty.add(endpoint.key)
        if old is None or old.name != endpoint.name:
            self._dispatch_dirty = True  # the set of interfaces changed
        if old is not None and old.name != endpoint.name:
            self._removed_ifaces.add(old.name)

    def remove(self, key: WorkloadEndpointKey) -> None:
        old = self._endpoints.pop(key, None)
        if old is not None:
            self._removed_ifaces.add(old[0].name)
            self._dispatch_dirty = True

    def write(self, target: Target[R], everything: bool) -> None:
        in_use = {endpoint.name for endpoint, _ in self._endpoints.values()}
        dirty = set(self._endpoints) if everything else self._dirty
        names = target.names
        for version in target.versions:
            table = target.table("filter", version)
            render = target.renderer("filter", version)
            for iface in self._removed_ifaces - in_use:
                table.remove_chain(names.to_workload(iface))
                table.remove_chain(names.from_workload(iface))
            for key in dirty:
                entry = self._endpoints.get(key)
                if entry is not None:
                    for chain in render.workload_chains(*entry):
                        table.update_chain(chain)
            if everything or self._dispatch_dirty:
                dispatch = render.workload_dispatch(in_use)
                for chain in dispatch:
                    table.update_chain(chain)
                chains = {c.name for c in dispatch}
                for stale in self._dispatch_chains.get(version, set()) - chains:
                    table.remove_chain(stale)
                self._dispatch_chains[version] = chains
        self._dirty.clear()
        self._removed_ifaces.clear()
        self._dispatch_dirty = False
