"""NatWriter: the IP pool sets, NAT-outgoing and floating IPs (nat table)."""

from __future__ import annotations

from dataplane.linux.netlink.overlay_plan import ALL_HOSTS_SET
from dataplane.linux.render.nat import ALL_POOLS_SET, MASQ_POOLS_SET, NatRenderer
from dataplane.linux.writers.groups import ChainGroups
from dataplane.linux.writers.target import R, Target
from dataplane.model import IPPool, IPSet, IPSetType, NatInfo, WorkloadEndpointKey

__all__ = ["NatWriter"]


class NatWriter:
    def __init__(self) -> None:
        self._pools: dict[str, IPPool] = {}
        self._floating: dict[WorkloadEndpointKey, tuple[NatInfo, ...]] = {}
        self._pools_dirty = True
        self._dirty = True
        self._groups = ChainGroups()
        self._tunnels: dict[int, str] = {}

    def set_tunnels(self, tunnels: dict[int, str]) -> None:
        """This node's VXLAN device per IP version (those with a tunnel address)."""
        if tunnels != self._tunnels:
            self._tunnels = dict(tunnels)
            self._dirty = True

    def set_pool(self, pool_id: str, pool: IPPool) -> None:
        self._pools[pool_id] = pool
        self._pools_dirty = True

    def remove_pool(self, pool_id: str) -> None:
        if self._pools.pop(pool_id, None) is not None:
            self._pools_dirty = True

    def set_floating_ips(self, key: WorkloadEndpointKey, nats: tuple[NatInfo, ...]) -> None:
        if self._floating.get(key) != nats:
            self._dirty = True
        self._floating[key] = nats

    def remove_endpoint(self, key: WorkloadEndpointKey) -> None:
        if self._floating.pop(key, ()):
            self._dirty = True

    def pool_cidrs(self) -> frozenset[str]:
        """Every IP pool's prefix."""
        return frozenset(p.cidr for p in self._pools.values())

    def write(self, target: Target[R], everything: bool) -> None:
        if not (everything or self._dirty or self._pools_dirty):
            return
        if self._pools_dirty:
            all_pools = frozenset(p.cidr for p in self._pools.values())
            masq = frozenset(p.cidr for p in self._pools.values() if p.masquerade)
            for set_id, members in ((ALL_POOLS_SET, all_pools), (MASQ_POOLS_SET, masq)):
                target.ipsets.replace(IPSet(set_id, IPSetType.NET, members))
            self._pools_dirty = False
        # As Felix's floating IP manager: only with FloatingIPs Enabled, or for
        # OpenStack's endpoints (a config change renders everything again).
        enabled = target.config.floating_ips
        floating = [
            nat
            for key, nats in self._floating.items()
            if enabled or key.orchestrator_id == "openstack"
            for nat in nats
        ]
        spare_hosts = target.config.nat_outgoing_exclusions == "ippoolsandhostips"
        for version in target.versions:
            all_hosts = target.ipsets.kernel_name(ALL_HOSTS_SET, version) if spare_hosts else ""
            renderer = NatRenderer(
                version,
                target.names,
                target.renderer("nat", version).out,
                target.ipsets.kernel_name(ALL_POOLS_SET, version),
                target.ipsets.kernel_name(MASQ_POOLS_SET, version),
                target.renderer("filter", version).marks.masq,
                target.config.nat_port_range,
                self._tunnels.get(version, ""),
                all_hosts,
                target.config.nat_outgoing_address if version == 4 else "",
                target.config.nat_outgoing_interface_filter,
            )
            table = target.table("nat", version)
            self._groups.set(table, "nat", renderer.chains(floating))
            for builtin, rules in renderer.hooks().items():
                table.set_hooks(builtin, rules)
        self._dirty = False
