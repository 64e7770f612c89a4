"""DscpWriter: the mangle table's egress DSCP marking of workload and host endpoints.

Both kinds of endpoint may carry ``qos_policies``; a change to any of them
renders the (small) chain again. See :mod:`dataplane.linux.render.dscp`.
"""

from __future__ import annotations

from dataplane.linux.render.dscp import DscpSource, dscp_chains, dscp_hooks
from dataplane.linux.render.nat import ALL_POOLS_SET
from dataplane.linux.writers.groups import ChainGroups
from dataplane.linux.writers.target import R, Target
from dataplane.model import HostEndpoint, HostEndpointKey, WorkloadEndpoint, WorkloadEndpointKey

__all__ = ["DscpWriter"]


class DscpWriter:
    def __init__(self) -> None:
        self._sources: dict[WorkloadEndpointKey | HostEndpointKey, DscpSource] = {}
        self._groups = ChainGroups()
        self._dirty = True

    def set_workload(self, endpoint: WorkloadEndpoint) -> None:
        addresses = (*endpoint.ipv4_nets, *endpoint.ipv6_nets)
        self._set(endpoint.key, DscpSource(str(endpoint.key), addresses, endpoint.dscp))

    def set_host(self, endpoint: HostEndpoint) -> None:
        addresses = (*endpoint.expected_ipv4_addrs, *endpoint.expected_ipv6_addrs)
        self._set(endpoint.key, DscpSource(f"host {endpoint.key}", addresses, endpoint.dscp))

    def remove(self, key: WorkloadEndpointKey | HostEndpointKey) -> None:
        if self._sources.pop(key, None) is not None:
            self._dirty = True

    def _set(self, key: WorkloadEndpointKey | HostEndpointKey, source: DscpSource) -> None:
        if not source.policies:
            self.remove(key)
        elif self._sources.get(key) != source:
            self._sources[key] = source
            self._dirty = True

    def write(self, target: Target[R], everything: bool) -> None:
        if not (everything or self._dirty):
            return
        for version in target.versions:
            table = target.table("mangle", version)
            out = target.renderer("mangle", version).out
            pools = target.ipsets.kernel_name(ALL_POOLS_SET, version)
            chains = dscp_chains(target.names, out, version, self._sources.values(), pools)
            self._groups.set(table, "dscp", chains)
            for builtin, rules in dscp_hooks(target.names, out).items():
                table.set_hooks(builtin, rules)
        self._dirty = False
