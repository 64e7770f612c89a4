"""LinuxPlatform: model values in, ipsets, iptables, routes and sysctls out.

A thin coordinator. The managers hand it platform-neutral changes (a
policy's rules, an endpoint and its effective policy, a service); it
forwards each to the per-feature writers that keep it
(:mod:`dataplane.linux.writers`), and at each apply lets them write into
the programmers and runs those in the one order fixed here and nowhere
else (see :meth:`LinuxPlatform.apply`).

Start-up adopts what a previous run left: every programmer first reads the
kernel and then writes only the difference, so a restart re-asserts the
same rules without ever flushing them and established connections survive.
Refresh timers make the next apply re-read the kernel, which repairs
anything someone flushed or deleted behind our back.
"""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Callable, Mapping, Sequence

import trio

from dataplane.config import Config
from dataplane.linux.backend import detect_backend
from dataplane.linux.cmd import CommandRunner, ProcessRunner
from dataplane.linux.conntrack import ConntrackCleaner
from dataplane.linux.filter_render import FilterRenderer
from dataplane.linux.healthcheck import HealthCheckServer
from dataplane.linux.ipsets import IPSetsProgrammer
from dataplane.linux.iptables import IptRule
from dataplane.linux.links import LinkMonitor
from dataplane.linux.marks import Marks, set_mark
from dataplane.linux.names import ChainNames
from dataplane.linux.owners import ChainOwner, find_owner
from dataplane.linux.pending_ipsets import PendingIPSets
from dataplane.linux.refresh import RefreshTimers
from dataplane.linux.routes import NetlinkHandle, RouteProgrammer
from dataplane.linux.rule_render import RuleRenderer
from dataplane.linux.sysctls import SysctlWriter
from dataplane.linux.table import FAIL_CLOSED, IptablesCommands, Table
from dataplane.linux.writers.base import FilterBase
from dataplane.linux.writers.hosts import HostEndpointWriter
from dataplane.linux.writers.nat import NatWriter
from dataplane.linux.writers.policy import PolicyWriter
from dataplane.linux.writers.routes import RoutesWriter
from dataplane.linux.writers.services import ServiceWriter
from dataplane.linux.writers.target import Target
from dataplane.linux.writers.workloads import WorkloadWriter
from dataplane.model import (
    EffectivePolicy,
    EndpointStatus,
    HostEffectivePolicy,
    HostEndpoint,
    HostEndpointKey,
    IPPool,
    IPSet,
    Policy,
    PolicyKey,
    Profile,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)
from dataplane.platform import EndpointKey, PolicyUsers
from dataplane.service_model import Service, ServiceKey

__all__ = ["LinuxPlatform"]

log = logging.getLogger(__name__)

# While an endpoint's interface is missing, look again this often even if no
# link notification arrives (the CNI plugin creates the interface moments
# after Felix announces the endpoint).
_PENDING_RETRY_SECONDS = 2.0
_ROUTE_PROTOCOL_DEFAULT = 80
_TABLES = ("raw", "mangle", "nat", "filter")


def _default_netlink() -> NetlinkHandle:
    from pyroute2 import IPRoute  # type: ignore[import-untyped]  # noqa: PLC0415

    handle: NetlinkHandle = IPRoute()
    return handle


class _NoUsers:
    """Until the loop binds the managers' index (a platform used on its own)."""

    def endpoints_using_policy(self, key: PolicyKey) -> frozenset[EndpointKey]:
        return frozenset()

    def endpoints_using_profile(self, name: str) -> frozenset[EndpointKey]:
        return frozenset()

    def endpoints_using_sets(self, set_ids: object) -> frozenset[EndpointKey]:
        return frozenset()


class LinuxPlatform:
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
        self.config = Config()
        self._runner = runner or ProcessRunner()
        self._netlink = netlink
        self._sysctl_root = sysctl_root
        self.names = ChainNames(chain_prefix)
        self.route_protocol = route_protocol
        self._clock = clock
        self.backend: str | None = None
        self._users: PolicyUsers = _NoUsers()
        self._health = HealthCheckServer()
        self._conntrack = ConntrackCleaner(self._runner)
        self._links = LinkMonitor(netlink)
        self._links_changed = False
        self._wakeup: Callable[[], None] = lambda: None
        # The writers, one per feature; each owns its desired state.
        self._base = FilterBase()
        self._policies = PolicyWriter()
        self._workloads = WorkloadWriter()
        self._hosts = HostEndpointWriter()
        self._nat = NatWriter()
        self._services = ServiceWriter(self._conntrack, self._health)
        self._routes_writer = RoutesWriter()
        self._everything = True  # first apply, or the configuration changed
        # Programmers, built at the first apply (backend detection is I/O).
        self._ipset_changes = PendingIPSets()
        self._ipsets: IPSetsProgrammer | None = None
        self._tables: dict[tuple[str, int], Table] = {}
        self._routes: RouteProgrammer | None = None
        self._sysctls: SysctlWriter | None = None
        self._filters: dict[int, FilterRenderer] = {}
        self._timers = RefreshTimers(clock)
        self._statuses: dict[EndpointKey, EndpointStatus] = {}
        self._last_apply = -math.inf
        self._sysctl_reported: set[str] = set()

    # --- sinks: forwarded to the writers that keep each value ----------------------

    def bind_policy_users(self, users: PolicyUsers) -> None:
        self._users = users

    def replace_ipset(self, ipset: IPSet) -> None:
        self._ipset_changes.replace(ipset, self._ipsets)

    def update_ipset_members(
        self, set_id: str, added: frozenset[str], removed: frozenset[str]
    ) -> None:
        self._ipset_changes.update(set_id, added, removed, self._ipsets)

    def remove_ipset(self, set_id: str) -> None:
        self._ipset_changes.remove(set_id, self._ipsets)

    def set_policy(self, key: PolicyKey, policy: Policy) -> None:
        self._policies.set_policy(key, policy)
        self._hosts.policy_changed(key, policy)

    def remove_policy(self, key: PolicyKey) -> None:
        self._policies.remove_policy(key)
        self._hosts.policy_changed(key, None)

    def set_profile(self, profile_id: str, profile: Profile) -> None:
        self._policies.set_profile(profile_id, profile)

    def remove_profile(self, profile_id: str) -> None:
        self._policies.remove_profile(profile_id)

    def set_workload_endpoint(self, endpoint: WorkloadEndpoint, policy: EffectivePolicy) -> None:
        self._workloads.set(endpoint, policy)
        self._nat.set_floating_ips(endpoint.key, endpoint.ipv4_nat + endpoint.ipv6_nat)
        self._routes_writer.set(endpoint)

    def remove_workload_endpoint(self, key: WorkloadEndpointKey) -> None:
        self._workloads.remove(key)
        self._nat.remove_endpoint(key)
        self._routes_writer.remove(key)

    def set_host_endpoint(self, endpoint: HostEndpoint, policy: HostEffectivePolicy) -> None:
        self._hosts.set(endpoint, policy)

    def remove_host_endpoint(self, key: HostEndpointKey) -> None:
        self._hosts.remove(key)

    def set_ip_pool(self, pool_id: str, pool: IPPool) -> None:
        self._nat.set_pool(pool_id, pool)

    def remove_ip_pool(self, pool_id: str) -> None:
        self._nat.remove_pool(pool_id)

    def set_service(self, service: Service) -> None:
        self._services.set(service)

    def remove_service(self, key: ServiceKey) -> None:
        self._services.remove(key)

    # --- configuration and start-up -------------------------------------------------

    def configure(self, config: Config) -> None:
        if self._tables and (
            config.iptables_backend != self.config.iptables_backend
            or config.ipv6_support != self.config.ipv6_support
        ):
            log.warning("IptablesBackend/Ipv6Support changes take effect after a restart")
        self.config = config
        self._filters = {}
        self._everything = True

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
        self._ipset_changes.replay_into(self._ipsets)
        # A chain the kernel refuses and that has no last good version is
        # written fail-closed: DROP, except in nat, which cannot drop and
        # sets the mark the filter table drops on instead.
        drop_mark = Marks.from_mask(config.iptables_mark_mask).drop
        fail_closed = {"nat": (IptRule("", set_mark(drop_mark)),)}
        for version in self._versions():
            commands = IptablesCommands.for_backend(self.backend, version)
            for table in _TABLES:
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
        self._timers.start()

    def _ipset_name(self, set_id: str, version: int) -> str | None:
        assert self._ipsets is not None
        return self._ipsets.kernel_name(set_id, version) if self._ipsets.wants(set_id) else None

    def _filter(self, version: int) -> FilterRenderer:
        renderer = self._filters.get(version)
        if renderer is None:
            marks = Marks.from_mask(self.config.iptables_mark_mask)
            rules = RuleRenderer(version, marks, self._ipset_name, self.config.log_prefix)
            renderer = FilterRenderer(version, self.config, marks, self.names, rules)
            self._filters[version] = renderer
        return renderer

    def _target(self) -> Target:
        assert self._ipsets is not None
        versions = self._versions()
        return Target(
            versions,
            self.config,
            self.names,
            self._tables,
            self._ipsets,
            {v: self._filter(v) for v in versions},
        )

    # --- apply -------------------------------------------------------------------------

    def _mark_due_for_resync(self, fired: list[str]) -> None:
        assert self._ipsets is not None and self._routes and self._sysctls
        if "iptables" in fired:
            for table in self._tables.values():
                table.mark_for_resync()
        if "ipsets" in fired:
            self._ipsets.mark_for_resync()
        if "routes" in fired:
            self._routes.mark_for_resync()
            self._sysctls.mark_for_resync()

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
        fired = self._timers.due()
        self._mark_due_for_resync(fired)
        try:
            await self._program()
        finally:
            self._timers.rearm(fired, self.config)

    def _write(self) -> None:
        target, everything = self._target(), self._everything
        for writer in (
            self._base,
            self._policies,
            self._workloads,
            self._hosts,
            self._nat,
            self._services,
        ):
            writer.write(target, everything)
        self._everything = False

    async def _program(self) -> None:
        assert self._ipsets is not None and self._routes is not None
        assert self._sysctls is not None
        self._write()
        await self._ipsets.apply_updates()
        for set_id, message in self._ipsets.take_refusals():
            log.error(
                "IP set %s refused by the kernel: %s; quarantined, the kernel keeps what it"
                " holds of it",
                set_id,
                message,
            )
        for table in _TABLES:
            for version in self._versions():
                await self._tables[(table, version)].apply()
        self._report_refusals()
        # UDP/SCTP flows to removed backends: only now that the new rules
        # are in force, or the next packet would re-create them.
        await self._conntrack.apply()
        self._routes.set_routes(self._routes_writer.routes())
        await self._routes.apply()
        for cidr, message in self._routes.take_refusals():
            log.error("route to %s refused by the kernel: %s; quarantined", cidr, message)
        await self._sysctls.apply(self._routes_writer.sysctls(self._routes.links))
        for iface, message in self._sysctls.failed.items():
            if iface not in self._sysctl_reported:
                log.error("interface %s: %s; retried at the next apply", iface, message)
        self._sysctl_reported = set(self._sysctls.failed)
        await self._ipsets.apply_deletions()
        self._links_changed = False
        self._update_statuses()
        self._last_apply = self._clock()

    # --- quarantine and status -----------------------------------------------------------

    def _owner(self, table: str, version: int, chain: str, index: int | None) -> ChainOwner:
        return find_owner(
            chain,
            index,
            names=self.names,
            render=self._filter(version).rules,
            policies=self._policies.policies,
            profiles=self._policies.profiles,
            workloads=self._workloads,
            hosts=self._hosts,
            users=self._users,
            service_of=lambda name: self._services.service_of(table, version, name),
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
        assert self._routes is not None and self._ipsets is not None
        links = self._routes.links
        statuses: dict[EndpointKey, EndpointStatus] = {}
        for key, wep in self._workloads:
            link = links.get(wep.name)
            up = wep.admin_up and link is not None and link.up
            statuses[key] = EndpointStatus.UP if up else EndpointStatus.DOWN
        for hkey, hep in self._hosts:
            link = links.get(hep.name)
            statuses[hkey] = EndpointStatus.UP if link and link.up else EndpointStatus.DOWN
        # An endpoint whose policy could not be programmed as asked says so
        # (its traffic meets the last good or a fail-closed version).
        failing: set[EndpointKey] = set()
        if any(t.quarantine for t in self._tables.values()):
            for *_, owner in self.quarantined():
                failing |= owner.endpoints
        bad_routes = frozenset(self._routes.quarantine)
        bad_ifaces = self._sysctls.failed if self._sysctls else {}
        if bad_routes or bad_ifaces:
            failing |= self._routes_writer.endpoints_failing(bad_routes, bad_ifaces)
        if self._ipsets.quarantine:
            failing |= self._users.endpoints_using_sets(self._ipsets.quarantine)
        for endpoint in failing & statuses.keys():
            statuses[endpoint] = EndpointStatus.ERROR
        self._statuses = statuses

    def endpoint_statuses(self) -> Mapping[EndpointKey, EndpointStatus]:
        return self._statuses

    def wants_apply_at(self) -> float:
        if self._ipsets is None:
            return math.inf
        refresh = min(
            self._timers.next_due(),
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
                for name in _TABLES:
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
            out.extend(self._routes_writer.dump())
        return "\n".join(out) + "\n"
