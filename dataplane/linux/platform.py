"""LinuxPlatform: desired model state -> ipsets, iptables, routes, sysctls.

Holds the desired state the managers hand over, renders what changed into
iptables chains (pure renderers) and programs the kernel in one order,
fixed here and nowhere else (see :meth:`LinuxPlatform.apply`).

Start-up adopts what a previous run left: every programmer first reads the
kernel and then writes only the difference, so a restart re-asserts the
same rules without ever flushing them and established connections survive.
Refresh timers (``IptablesRefreshInterval``, ``IpsetsRefreshInterval``,
``RouteRefreshInterval``) make the next apply re-read the kernel, which
repairs anything someone flushed or deleted behind our back.
"""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import trio

from dataplane.config import Config
from dataplane.linux.backend import detect_backend
from dataplane.linux.cmd import CommandRunner, ProcessRunner
from dataplane.linux.conntrack import ConntrackCleaner
from dataplane.linux.desired import DesiredState
from dataplane.linux.filter_render import FilterRenderer
from dataplane.linux.healthcheck import HealthCheckServer
from dataplane.linux.hostpolicy_render import HostPolicyRenderer
from dataplane.linux.ipsets import IPSetsProgrammer
from dataplane.linux.iptables import Chain, IptRule
from dataplane.linux.links import LinkMonitor
from dataplane.linux.marks import Marks, set_mark
from dataplane.linux.names import ChainNames
from dataplane.linux.nat_render import ALL_POOLS_SET, MASQ_POOLS_SET, NatRenderer
from dataplane.linux.owners import ChainOwner, endpoints_using_sets, find_owner
from dataplane.linux.routes import NetlinkHandle, RouteProgrammer
from dataplane.linux.rule_render import RuleRenderer
from dataplane.linux.service_render import Frontend, RenderedService, ServiceRenderer
from dataplane.linux.sysctls import SysctlWriter
from dataplane.linux.table import FAIL_CLOSED, IptablesCommands, Table
from dataplane.model import (
    EndpointStatus,
    IPSet,
    IPSetType,
)
from dataplane.platform import EndpointKey
from dataplane.service_model import ServiceKey

__all__ = ["LinuxPlatform"]

log = logging.getLogger(__name__)

# While an endpoint's interface is missing, look again this often even if no
# link notification arrives (the CNI plugin creates the interface moments
# after Felix announces the endpoint).
_PENDING_RETRY_SECONDS = 2.0
_ROUTE_PROTOCOL_DEFAULT = 80


def _default_netlink() -> NetlinkHandle:
    from pyroute2 import IPRoute  # type: ignore[import-untyped]  # noqa: PLC0415

    handle: NetlinkHandle = IPRoute()
    return handle


class LinuxPlatform(DesiredState):
    name = "linux"

    def __init__(
        self,
        *,
        runner: CommandRunner | None = None,
        netlink: Callable[[], NetlinkHandle] = _default_netlink,
        sysctl_root: str = "/proc/sys",
        chain_prefix: str = "cali-",
        route_protocol: int = _ROUTE_PROTOCOL_DEFAULT,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        super().__init__()
        self.config = Config()
        self._runner = runner or ProcessRunner()
        self._netlink = netlink
        self._sysctl_root = sysctl_root
        self.names = ChainNames(chain_prefix)
        self.route_protocol = route_protocol
        self._clock = clock
        self.backend: str | None = None
        self._frontends: dict[tuple[int, ServiceKey], list[Frontend]] = {}
        self._local_endpoints: dict[ServiceKey, int] = {}
        # Chains rendered as a unit (a service, the NAT base, ...), by table.
        self._groups: dict[tuple[str, int, str], set[str]] = {}
        self._health = HealthCheckServer()
        self._conntrack = ConntrackCleaner(self._runner)
        self._links = LinkMonitor(netlink)
        self._links_changed = False
        self._wakeup: Callable[[], None] = lambda: None
        self._ipset_queue: list[tuple[str, Any]] = []
        self._dispatch_chains: dict[int, set[str]] = {}
        # Programmers, built at the first apply (backend detection is I/O).
        self._ipsets: IPSetsProgrammer | None = None
        self._tables: dict[tuple[str, int], Table] = {}
        self._routes: RouteProgrammer | None = None
        self._sysctls: SysctlWriter | None = None
        self._renderers: dict[int, FilterRenderer] = {}
        self._next_refresh: dict[str, float] = {}
        self._statuses: dict[EndpointKey, EndpointStatus] = {}
        self._last_apply = -math.inf
        self._sysctl_reported: set[str] = set()

    # --- programming helpers ----------------------------------------------------

    def _ipset_op(self, op: str, arg: Any) -> None:
        # Before the first apply the programmer does not exist yet (creating
        # it needs I/O); changes queue up and are replayed into it in order.
        if self._ipsets is None:
            self._ipset_queue.append((op, arg))
        else:
            self._replay_ipset_op(op, arg)

    # --- configuration ------------------------------------------------------------

    def configure(self, config: Config) -> None:
        if self._tables and (
            config.iptables_backend != self.config.iptables_backend
            or config.ipv6_support != self.config.ipv6_support
        ):
            log.warning("IptablesBackend/Ipv6Support changes take effect after a restart")
        self.config = config
        self._renderers = {}
        self._rerender_all = True
        self._pools_dirty = True
        self._dirty_services |= set(self.services)

    def _versions(self) -> tuple[int, ...]:
        return (4, 6) if self.config.ipv6_support else (4,)

    async def _start(self) -> None:
        config = self.config
        self.backend = await detect_backend(self._runner, config.iptables_backend)
        self._ipsets = IPSetsProgrammer(
            self._runner,
            ipv6=config.ipv6_support,
            max_size=config.max_ipset_size,
            clock=self._clock,
        )
        for op, arg in self._ipset_queue:
            self._replay_ipset_op(op, arg)
        self._ipset_queue = []
        # A chain the kernel refuses and that has no last good version is
        # written fail-closed: DROP, except in nat, which cannot drop and
        # sets the mark the filter table drops on instead.
        drop_mark = Marks.from_mask(config.iptables_mark_mask).drop
        fail_closed = {"nat": (IptRule("", set_mark(drop_mark)),)}
        for version in self._versions():
            commands = IptablesCommands.for_backend(self.backend, version)
            for table in ("raw", "mangle", "nat", "filter"):
                self._tables[(table, version)] = Table(
                    table,
                    version,
                    self._runner,
                    commands,
                    prefix=self.names.prefix,
                    insert_mode=config.chain_insert_mode,
                    fail_closed=fail_closed.get(table, FAIL_CLOSED),
                    clock=self._clock,
                )
        self._routes = RouteProgrammer(
            self._netlink,
            self._links,
            protocol=self.route_protocol,
            ipv6=config.ipv6_support,
            clock=self._clock,
        )
        self._sysctls = SysctlWriter(self._sysctl_root, ipv6=config.ipv6_support)
        now = self._clock()
        for timer in ("iptables", "ipsets", "routes"):
            self._next_refresh[timer] = now  # adopt: read the kernel at the first apply

    def _replay_ipset_op(self, op: str, arg: Any) -> None:
        assert self._ipsets is not None
        if op == "replace":
            self._ipsets.replace(arg)
        elif op == "update":
            self._ipsets.update_members(*arg)
        else:
            self._ipsets.remove(arg)

    # --- rendering -------------------------------------------------------------------

    def _ipset_name(self, set_id: str, version: int) -> str | None:
        if set_id not in self._ipset_types:
            return None
        assert self._ipsets is not None
        return self._ipsets.kernel_name(set_id, version)

    def _filter_renderer(self, version: int) -> FilterRenderer:
        renderer = self._renderers.get(version)
        if renderer is None:
            marks = Marks.from_mask(self.config.iptables_mark_mask)
            rules = RuleRenderer(version, marks, self._ipset_name, self.config.log_prefix)
            renderer = FilterRenderer(version, self.config, marks, self.names, rules)
            self._renderers[version] = renderer
        return renderer

    def _render(self) -> None:
        everything = self._rerender_all
        policies = set(self.policies) | self._dirty_policies if everything else self._dirty_policies
        profiles = set(self.profiles) | self._dirty_profiles if everything else self._dirty_profiles
        for version in self._versions():
            table = self._tables[("filter", version)]
            render = self._filter_renderer(version)
            for key in policies:
                chains = (
                    render.policy_chains(key, self.policies[key]) if key in self.policies else []
                )
                for inbound in (True, False):
                    name = self.names.policy(key, inbound)
                    chain = next((c for c in chains if c.name == name), None)
                    if chain is None:
                        table.remove_chain(name)
                    else:
                        table.update_chain(chain)
            for name in profiles:
                if name in self.profiles:
                    for chain in render.profile_chains(name, self.profiles[name]):
                        table.update_chain(chain)
                else:
                    table.remove_chain(self.names.profile(name, True))
                    table.remove_chain(self.names.profile(name, False))
            if everything:
                table.set_chains(self._all_filter_chains(render, table))
                for builtin, rules in render.hooks().items():
                    table.set_hooks(builtin, rules)
                self._dispatch_chains[version] = {
                    c.name for c in render.workload_dispatch(self._ifaces())
                }
                continue
            in_use = self._ifaces()
            for iface in self._removed_ifaces - in_use:
                table.remove_chain(self.names.to_workload(iface))
                table.remove_chain(self.names.from_workload(iface))
            for wkey in self._dirty_workloads:
                wep = self.workloads.get(wkey)
                if wep is not None:
                    for chain in render.workload_chains(
                        wep, self.policies.__contains__, self.profiles.__contains__
                    ):
                        table.update_chain(chain)
            if self._dispatch_dirty:
                # Only the dispatch tree changes shape when endpoints come and
                # go; everything else stays as it is.
                dispatch = render.workload_dispatch(in_use)
                for chain in dispatch:
                    table.update_chain(chain)
                names = {c.name for c in dispatch}
                for stale in self._dispatch_chains.get(version, set()) - names:
                    table.remove_chain(stale)
                self._dispatch_chains[version] = names
        if everything or any(
            p is None or p.untracked or p.pre_dnat
            for p in (self.policies.get(k) for k in self._dirty_policies)
        ):
            self._render_host_policy()
        if everything or self._dirty_workloads or self._removed_ifaces or self._pools_dirty:
            self._render_nat()
        if everything or self._dirty_services:
            self._render_services(everything)
        self._dirty_policies.clear()
        self._dirty_profiles.clear()
        self._dirty_workloads.clear()
        self._removed_ifaces.clear()
        self._dispatch_dirty = False
        self._rerender_all = False

    def _ifaces(self) -> set[str]:
        return {w.name for w in self.workloads.values()}

    def _all_filter_chains(self, render: FilterRenderer, table: Table) -> list[Any]:
        known_policy = self.policies.__contains__
        known_profile = self.profiles.__contains__
        chains = list(render.static_chains())
        for key, policy in self.policies.items():
            chains += render.policy_chains(key, policy)
        for name, profile in self.profiles.items():
            chains += render.profile_chains(name, profile)
        for wep in self.workloads.values():
            chains += render.workload_chains(wep, known_policy, known_profile)
        chains += render.workload_dispatch(w.name for w in self.workloads.values())
        for hep in self.hosts.values():
            chains += render.host_endpoint_chains(hep, known_policy, known_profile)
        chains += render.host_dispatch(
            (h.name for h in self.hosts.values()),
            (h.name for h in self.hosts.values() if h.forward_tiers),
        )
        # The service reject chain lives in filter too; keep what is there
        # (services re-render it whenever their frontends change).
        reject = table.snapshot().get(self.names.top("svc-reject"))
        chains.append(Chain(self.names.top("svc-reject"), reject or ()))
        return chains

    def _render_host_policy(self) -> None:
        """Raw (untracked) and mangle (pre-DNAT) chains: few, so always whole."""
        heps = list(self.hosts.values())
        for version in self._versions():
            render = HostPolicyRenderer(self._filter_renderer(version))
            for table, chains in (
                ("raw", render.raw_chains(heps, self.policies)),
                ("mangle", render.mangle_chains(heps, self.policies)),
            ):
                programmer = self._tables[(table, version)]
                programmer.set_chains(chains)
                for builtin, rules in render.hooks(table).items():
                    programmer.set_hooks(builtin, rules)

    def _render_nat(self) -> None:
        assert self._ipsets is not None
        if self._pools_dirty:
            all_pools = frozenset(p.cidr for p in self.pools.values())
            masq = frozenset(p.cidr for p in self.pools.values() if p.masquerade)
            for set_id, members in ((ALL_POOLS_SET, all_pools), (MASQ_POOLS_SET, masq)):
                self._ipsets.replace(IPSet(set_id, IPSetType.NET, members))
            self._pools_dirty = False
        floating = [nat for wep in self.workloads.values() for nat in wep.ipv4_nat + wep.ipv6_nat]
        for version in self._versions():
            renderer = NatRenderer(
                version,
                self.names,
                self._ipsets.kernel_name(ALL_POOLS_SET, version),
                self._ipsets.kernel_name(MASQ_POOLS_SET, version),
                self._filter_renderer(version).marks.masq,
                self.config.nat_port_range,
            )
            table = self._tables[("nat", version)]
            self._set_group(table, "nat", renderer.chains(floating))
            for builtin, rules in renderer.hooks().items():
                table.set_hooks(builtin, rules)

    def _set_group(self, table: Table, group: str, chains: list[Chain]) -> None:
        """Replace one unit of chains in ``table``, removing its stale ones."""
        key = (table.name, table.version, group)
        names = {c.name for c in chains}
        for stale in self._groups.get(key, set()) - names:
            table.remove_chain(stale)
        for chain in chains:
            table.update_chain(chain)
        self._groups[key] = names

    def _render_services(self, everything: bool) -> None:
        assert self._ipsets is not None
        keys = set(self.services) | self._dirty_services if everything else self._dirty_services
        for key in keys:
            self._local_endpoints.pop(key, None)
            self._conntrack.observe(key, self.services.get(key), self._versions())
        for version in self._versions():
            marks = self._filter_renderer(version).marks
            renderer = ServiceRenderer(
                version, self.names, marks, self._ipsets.kernel_name(ALL_POOLS_SET, version)
            )
            nat = self._tables[("nat", version)]
            frontends_changed = everything
            for key in keys:
                service = self.services.get(key)
                rendered = renderer.render(service) if service else RenderedService()
                self._set_group(nat, f"svc:{key}", rendered.chains)
                old = self._frontends.pop((version, key), [])
                frontends_changed |= old != rendered.frontends
                if service is not None:
                    self._frontends[(version, key)] = rendered.frontends
                    self._local_endpoints[key] = max(
                        rendered.local_endpoints, self._local_endpoints.get(key, 0)
                    )
            if not frontends_changed:
                continue  # only backends changed: the tree and reject chain stand
            frontends = [f for (v, _), fs in self._frontends.items() if v == version for f in fs]
            # Only the dispatch tree's leaves for changed frontends differ, so
            # the table rewrites just those chains.
            self._set_group(nat, "svc-dispatch", renderer.dispatch(frontends))
            self._tables[("filter", version)].update_chain(renderer.rejects(frontends))
        self._health.update(
            {
                s.health_check_node_port: (key, self._local_endpoints.get(key, 0))
                for key, s in self.services.items()
                if s.external_local and s.health_check_node_port
            }
        )
        self._dirty_services.clear()

    # --- apply -------------------------------------------------------------------------

    def _intervals(self) -> dict[str, float]:
        return {
            "iptables": self.config.iptables_refresh_interval,
            "ipsets": self.config.ipsets_refresh_interval,
            "routes": self.config.route_refresh_interval,
        }

    def _refresh_due(self) -> list[str]:
        """Mark what is due for a re-read of the kernel; the timers that fired."""
        now = self._clock()
        fired = []
        for timer in self._intervals():
            if now < self._next_refresh.get(timer, math.inf):
                continue
            fired.append(timer)
            if timer == "iptables":
                for table in self._tables.values():
                    table.mark_for_resync()
            elif timer == "ipsets" and self._ipsets is not None:
                self._ipsets.mark_for_resync()
            elif timer == "routes" and self._routes and self._sysctls:
                self._routes.mark_for_resync()
                self._sysctls.mark_for_resync()
        return fired

    def _reschedule(self, fired: list[str]) -> None:
        # From the end of the apply: a refresh that takes long (re-reading a
        # huge table) must not find itself due again the moment it finishes.
        now = self._clock()
        intervals = self._intervals()
        for timer in fired:
            interval = intervals[timer]
            self._next_refresh[timer] = now + interval if interval > 0 else math.inf

    async def apply(self) -> None:
        """Program everything, in the one order that never leaves a gap.

        1. IP sets: create and fill new sets first -- rules may reference them.
        2. iptables, raw, mangle, nat, filter, v4 then v6, one atomic
           restore each: new policy is in force before anything below makes
           a pod reachable.
        3. Routes and interface sysctls: only now are new pods routable.
        4. IP set deletions last: no rule references them any more.
        """
        if self._ipsets is None:
            await self._start()
        assert self._ipsets is not None and self._routes is not None
        assert self._sysctls is not None
        fired = self._refresh_due()
        try:
            await self._program()
        finally:
            self._reschedule(fired)

    async def _program(self) -> None:
        assert self._ipsets is not None and self._routes is not None
        assert self._sysctls is not None
        self._render()
        await self._ipsets.apply_updates()
        for set_id, message in self._ipsets.take_refusals():
            log.error(
                "IP set %s refused by the kernel: %s; quarantined, the kernel keeps what it"
                " holds of it",
                set_id,
                message,
            )
        for table in ("raw", "mangle", "nat", "filter"):
            for version in self._versions():
                await self._tables[(table, version)].apply()
        self._report_refusals()
        # UDP/SCTP flows to removed backends: only now that the new rules
        # are in force, or the next packet would re-create them.
        await self._conntrack.apply()
        self._routes.set_routes(
            {
                net: wep.name
                for wep in self.workloads.values()
                for net in wep.ipv4_nets + wep.ipv6_nets
            }
        )
        await self._routes.apply()
        for cidr, message in self._routes.take_refusals():
            log.error("route to %s refused by the kernel: %s; quarantined", cidr, message)
        links = self._routes.links
        await self._sysctls.apply(
            (wep.name, links[wep.name].index, not wep.allow_spoofed_source_prefixes)
            for wep in self.workloads.values()
            if wep.name in links
        )
        for iface, message in self._sysctls.failed.items():
            if iface not in self._sysctl_reported:
                log.error("interface %s: %s; retried at the next apply", iface, message)
        self._sysctl_reported = set(self._sysctls.failed)
        await self._ipsets.apply_deletions()
        self._links_changed = False
        self._update_statuses()
        self._last_apply = self._clock()

    # --- quarantine ------------------------------------------------------------------

    def _owner(self, table: str, version: int, chain: str, index: int | None) -> ChainOwner:
        def service_of(name: str) -> ServiceKey | None:
            for (t, v, group), members in self._groups.items():
                if (t, v) == (table, version) and group.startswith("svc:") and name in members:
                    return next((k for k in self.services if f"svc:{k}" == group), None)
            return None

        return find_owner(
            chain,
            index,
            names=self.names,
            render=self._filter_renderer(version).rules,
            state=self,
            service_of=service_of,
        )

    def _report_refusals(self) -> None:
        """One line per newly refused chain, naming the object behind it."""
        for (table, version), programmer in self._tables.items():
            for refusal in programmer.take_refusals():
                owner = self._owner(table, version, refusal.chain, refusal.rule_index)
                kept = (
                    "last good version kept"
                    if programmer.keeps_last_good(refusal.chain)
                    else "fail-closed"
                )
                log.error(
                    "%s refused by the kernel (iptables v%d %s chain %s): %s; quarantined, %s",
                    owner.describe(),
                    version,
                    table,
                    refusal.chain,
                    refusal.message,
                    kept,
                )

    def quarantined(self) -> list[tuple[str, int, str, ChainOwner]]:
        """(table, version, chain, owner) of every chain in quarantine now."""
        return [
            (table, version, chain, self._owner(table, version, chain, None))
            for (table, version), programmer in sorted(self._tables.items())
            for chain in programmer.quarantine
        ]

    def _update_statuses(self) -> None:
        assert self._routes is not None
        links = self._routes.links
        statuses: dict[EndpointKey, EndpointStatus] = {}
        for key, wep in self.workloads.items():
            link = links.get(wep.name)
            up = wep.admin_up and link is not None and link.up
            statuses[key] = EndpointStatus.UP if up else EndpointStatus.DOWN
        for hkey, hep in self.hosts.items():
            link = links.get(hep.name)
            statuses[hkey] = EndpointStatus.UP if link and link.up else EndpointStatus.DOWN
        # An endpoint whose policy could not be programmed as asked says so
        # (its traffic meets the last good or a fail-closed version).
        held = any(t.quarantine for t in self._tables.values())
        for *_, owner in self.quarantined() if held else ():
            for endpoint in owner.endpoints:
                if endpoint in statuses:
                    statuses[endpoint] = EndpointStatus.ERROR
        bad_routes = frozenset(self._routes.quarantine)
        bad_ifaces = self._sysctls.failed if self._sysctls else {}
        for key, wep in self.workloads.items() if bad_routes or bad_ifaces else ():
            if wep.name in bad_ifaces or bad_routes.intersection(wep.ipv4_nets + wep.ipv6_nets):
                statuses[key] = EndpointStatus.ERROR
        bad_sets = frozenset(self._ipsets.quarantine) if self._ipsets else frozenset()
        if bad_sets:
            for endpoint in endpoints_using_sets(self, bad_sets):
                if endpoint in statuses:
                    statuses[endpoint] = EndpointStatus.ERROR
        self._statuses = statuses

    def wants_apply_at(self) -> float:
        if self._ipsets is None:
            return math.inf
        refresh = min(
            min(self._next_refresh.values(), default=math.inf),
            # Quarantined chains and sets are retried alone when their
            # backoff ends.
            min((t.quarantine.next_retry() for t in self._tables.values()), default=math.inf),
            self._ipsets.quarantine.next_retry(),
            self._routes.quarantine.next_retry() if self._routes else math.inf,
        )
        if self._links_changed:
            return -math.inf  # a link came, went or changed state: now
        if self._routes is not None and self._routes.pending:
            # Routes wait for interfaces the CNI plugin has not created yet;
            # the link monitor normally wakes us first, this is the backstop.
            return min(refresh, self._last_apply + _PENDING_RETRY_SECONDS)
        return refresh

    def set_wakeup(self, wakeup: Callable[[], None]) -> None:
        """How the platform wakes the main loop when the kernel changes."""
        self._wakeup = wakeup

    def _on_link_change(self) -> None:
        self._links_changed = True
        self._wakeup()

    def endpoint_statuses(self) -> Mapping[EndpointKey, EndpointStatus]:
        return self._statuses

    async def serve(self) -> None:
        """Health-check node ports, and following the node's links."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._health.serve)
            nursery.start_soon(self._links.watch, self._on_link_change)

    # --- cleanup and dumps ---------------------------------------------------------------

    async def cleanup(self, backends: Sequence[str] = ("legacy", "nft")) -> None:
        """Remove everything we own: chains, hook rules, sets, routes, sysctls.

        Chains go first, in every listed backend that is installed (a host
        may hold leftovers in both), because the kernel refuses to destroy
        an IP set that a rule still references.
        """
        if self._ipsets is None:
            await self._start()
        assert self._ipsets is not None and self._routes is not None
        assert self._sysctls is not None
        for backend in backends:
            if shutil.which(f"iptables-{backend}-save") is None:
                continue
            for version in (4, 6):
                commands = IptablesCommands.for_backend(backend, version)
                for name in ("raw", "mangle", "nat", "filter"):
                    table = Table(name, version, self._runner, commands, prefix=self.names.prefix)
                    await table.cleanup_all()
        await self._ipsets.cleanup_all()
        await self._routes.cleanup_all()
        links = self._routes.links
        prefixes = tuple(self.config.interface_prefixes)
        await self._sysctls.cleanup(name for name in links if name.startswith(prefixes))

    def dump(self) -> str:
        out = [f"linux platform, iptables backend {self.backend}"]
        for (table, version), programmer in sorted(self._tables.items()):
            out.append(f"*{table} (IPv{version})")
            for name, rules in sorted(programmer.snapshot().items()):
                out.append(f"  {name}")
                out.extend(f"    {r.text()}" for r in rules)
        if self._routes is not None:
            out.append("routes (ours):")
            out.extend(
                f"  {net} dev {wep.name}"
                for wep in self.workloads.values()
                for net in wep.ipv4_nets + wep.ipv6_nets
            )
        return "\n".join(out) + "\n"
