"""Desired: what the managers handed the Linux platform, kept by the per-feature writers.

The platform forwards each sink call to the writers that keep that value
(:mod:`dataplane.linux.writers`); at an apply :meth:`Desired.write` lets
every writer write what changed into the programmers and returns the
overlay plan that the VXLAN and route programmers take. The configuration
lives here too, because rendering depends on it: the IP pools'
encapsulation fills in the overlay switches Felix left unset, and any
change to either renders everything again.

No I/O here; the kernel side (programmers, their order, timers) is the
platform's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from dataplane.config import Config
from dataplane.core.healthcheck import HealthCheckServer
from dataplane.linux.iptables.serialise import IptablesSerialiser
from dataplane.linux.kernel.conntrack import ConntrackCleaner
from dataplane.linux.netlink.overlay_plan import OverlayPlan, resolve_encapsulation
from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.render.filter import FilterRenderer
from dataplane.linux.render.rule import RuleRenderer
from dataplane.linux.rules.chain import Serialiser
from dataplane.linux.rules.marks import Marks
from dataplane.linux.rules.match import Limit
from dataplane.linux.writers.base import FilterBase
from dataplane.linux.writers.dscp import DscpWriter
from dataplane.linux.writers.hosts import HostEndpointWriter
from dataplane.linux.writers.nat import NatWriter
from dataplane.linux.writers.overlay import OverlayWriter
from dataplane.linux.writers.policy import PolicyWriter
from dataplane.linux.writers.routes import RoutesWriter
from dataplane.linux.writers.services import ServiceWriter
from dataplane.linux.writers.shapes import TABLES, RuleTable, SetProgrammer
from dataplane.linux.writers.target import Target
from dataplane.linux.writers.workloads import WorkloadWriter
from dataplane.model.hosts import Encapsulation

if TYPE_CHECKING:
    from dataplane.linux.nftables.service_table import ServiceTable

__all__ = ["Desired"]


class Desired:
    def __init__(
        self,
        names: ChainNames,
        conntrack: ConntrackCleaner,
        health: HealthCheckServer,
        ipset_name: Callable[[str, int], str | None],
    ) -> None:
        self.names = names
        self._ipset_name = ipset_name
        # The writers, one per feature; each owns its desired state.
        self.base = FilterBase()
        self.policies = PolicyWriter()
        self.workloads = WorkloadWriter()
        self.hosts = HostEndpointWriter()
        self.nat = NatWriter()
        self.services = ServiceWriter(conntrack, health)
        self.dscp = DscpWriter()
        self.routes = RoutesWriter()
        self.overlay = OverlayWriter()
        self.config = Config()
        self.effective = self.config  # no pool uses an overlay yet
        self._renderers: dict[tuple[str, int], FilterRenderer[Any]] | None = None
        self._nftables = False
        self._everything = True  # first apply, or the configuration changed

    def configure(self, config: Config) -> None:
        self.config = config
        self._config_changed()

    def set_encapsulation(self, encapsulation: Encapsulation) -> None:
        if encapsulation == self.overlay.encapsulation:
            return
        # Felix restarts its dataplane when the pools' encapsulation changes;
        # here it only re-renders: the static chains and every workload's
        # chains depend on which overlays are on.
        self.overlay.set_encapsulation(encapsulation)
        self._config_changed()

    def _config_changed(self) -> None:
        """Render everything again, from the config with the pools' overlays filled in."""
        self.effective = resolve_encapsulation(self.config, self.overlay.encapsulation)
        self._renderers = None
        self._everything = True

    def _log_limit(self) -> Limit | None:
        c = self.config
        if not c.log_action_rate_limit:
            return None
        return Limit(c.log_action_rate_limit, c.log_action_rate_limit_burst)

    def versions(self) -> tuple[int, ...]:
        return (4, 6) if self.config.ipv6_support else (4,)

    def renderers(self, nftables: bool) -> dict[tuple[str, int], FilterRenderer[Any]]:
        """Each (table, version)'s renderer, in the backend's syntax.

        iptables: one per version for raw, mangle and filter (the nat
        table's serialiser has no scratch marks); nftables: one per table,
        whose jumps name the table's share of the family's one table.
        Made again only after a configuration change.
        """
        if self._renderers is not None and self._nftables == nftables:
            return self._renderers
        marks = Marks.from_mask(self.config.iptables_mark_mask)
        out: dict[tuple[str, int], FilterRenderer[Any]] = {}
        for version in self.versions():
            rules = RuleRenderer(
                version, marks, self._ipset_name, self.config.log_prefix, self._log_limit()
            )

            def make(
                serialiser: Serialiser[Any], v: int = version, rules: RuleRenderer = rules
            ) -> FilterRenderer[Any]:
                return FilterRenderer(v, self.effective, marks, self.names, rules, serialiser)

            if nftables:
                # Imported here: a node on iptables never loads nftables' modules.
                from dataplane.linux.nftables.serialise import NftSerialiser  # noqa: PLC0415

                for table in TABLES:
                    scratch = None if table == "nat" else marks
                    prefix = f"{table}-"
                    out[(table, version)] = make(NftSerialiser(version, scratch, prefix))
            else:
                shared = make(IptablesSerialiser(marks))
                out |= {(t, version): shared for t in TABLES if t != "nat"}
                out[("nat", version)] = make(IptablesSerialiser())
        self._renderers, self._nftables = out, nftables
        return out

    def plan(self) -> OverlayPlan:
        """The overlay for the current configuration (computed again only after a change)."""
        return self.overlay.plan(self.effective, self.versions())

    def write(
        self,
        tables: Mapping[tuple[str, int], RuleTable[Any]],
        ipsets: SetProgrammer,
        services: Mapping[int, ServiceTable],
    ) -> OverlayPlan:
        """Let every writer write what changed; the overlay plan they wrote for.

        ``services``: the services table per version on nftables (empty
        on iptables, whose nat table takes kube-proxy's chains).
        """
        versions = self.versions()
        target = Target(
            versions,
            self.effective,
            self.names,
            tables,
            ipsets,
            self.renderers(nftables=bool(services)),
            services,
        )
        self.services.set_pools(self.nat.pool_cidrs())
        plan = self.plan()
        self.nat.set_tunnels(
            {v: f.device.name for v, f in plan.families.items() if f.device is not None}
        )
        for writer in (
            self.overlay,  # first: the static chains match its IP sets
            self.base,
            self.policies,
            self.workloads,
            self.hosts,
            self.nat,  # keeps the all-pools set DSCP's rules match
            self.dscp,
            self.services,
        ):
            writer.write(target, self._everything)
        self._everything = False
        return plan

    def dump(self) -> list[str]:
        plan = self.plan()
        out = ["overlay:", *self.overlay.dump(plan), "routes (ours):"]
        routes = {**plan.routes(), **self.routes.routes()}
        out.extend(f"  {dst} {target.text()}" for dst, target in sorted(routes.items()))
        return out
