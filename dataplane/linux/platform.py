"""LinuxPlatform: model values in, ipsets, iptables, routes and sysctls out.

A thin coordinator. The managers hand it platform-neutral changes (a
policy's rules, an endpoint and its effective policy, a service); its
sinks (:mod:`dataplane.linux.sinks`) forward each to the per-feature
writers that keep it (:class:`~dataplane.linux.desired.Desired`), and at
each apply it lets them write into the programmers and runs those in the
one order fixed here and nowhere else (see :meth:`LinuxPlatform.apply`).

Start-up adopts what a previous run left: every programmer first reads the
kernel and then writes only the difference, so a restart re-asserts the
same rules without ever flushing them and established connections survive.
Refresh timers make the next apply re-read the kernel, which repairs
anything someone flushed or deleted behind our back.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import trio

from dataplane.config import Config
from dataplane.core.healthcheck import HealthCheckServer
from dataplane.core.platform import EndpointKey, NoPolicyUsers, ObjectError, PolicyUsers
from dataplane.errors import ProgrammingError
from dataplane.linux.desired import Desired
from dataplane.linux.kernel.cmd import CommandRunner, ProcessRunner
from dataplane.linux.kernel.conntrack import ConntrackCleaner
from dataplane.linux.kernel.errors import KERNEL_ERRORS
from dataplane.linux.metered import LinuxMeter, Sized
from dataplane.linux.netlink.batch import NetlinkWriter
from dataplane.linux.netlink.dump import platform_handle
from dataplane.linux.netlink.links import LinkMonitor
from dataplane.linux.netlink.mtu_file import MtuFile, host_mtu, pod_mtu
from dataplane.linux.netlink.overlay_plan import OverlayPlan
from dataplane.linux.netlink.routes import NetlinkHandle
from dataplane.linux.observed import Observed
from dataplane.linux.owners import ChainOwner
from dataplane.linux.pending_sets import PendingIPSets
from dataplane.linux.programmers import Programmers
from dataplane.linux.refresh import RefreshTimers
from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.render.rule_labels import RuleLabels, RuleMap
from dataplane.linux.reports import Reports, log_held_back
from dataplane.linux.sinks import Sinks
from dataplane.linux.statuses import EndpointStatuses
from dataplane.model import EndpointStatus

__all__ = ["LinuxPlatform"]

log = logging.getLogger(__name__)

# While an endpoint's interface is missing, look again this often even if no
# link notification arrives (the CNI plugin creates the interface moments
# after Felix announces the endpoint).
_PENDING_RETRY_SECONDS = 2.0
_ROUTE_PROTOCOL_DEFAULT = 80
# What a read beside the applies may meet (a bug is not among them).
_REFRESH_ERRORS: tuple[type[Exception], ...] = (ProgrammingError, *KERNEL_ERRORS)


class LinuxPlatform(Sinks, Observed):
    name = "linux"

    def __init__(
        self,
        *,
        runner: CommandRunner | None = None,
        netlink: Callable[[], NetlinkHandle] = platform_handle,
        netlink_writer: NetlinkWriter | None = None,
        sysctl_root: str = "/proc/sys",
        sysctl_state: Path | None = None,
        mtu_file: Path | None = None,
        chain_prefix: str = "cali-",
        route_protocol: int = _ROUTE_PROTOCOL_DEFAULT,
        clock: Callable[[], float] = trio.current_time,
        nftables_mode: str | None = None,
    ) -> None:
        self._runner = runner or ProcessRunner()
        # The operator's NFTablesMode (a flag), over the config's; None: the config's.
        self._nftables_mode = nftables_mode
        # Where the policy counters' saves run (the runner's namespace).
        self._netns = self._runner.netns if isinstance(self._runner, ProcessRunner) else None
        self._netlink = netlink
        # Route, neighbour and FDB writes (None: a raw netlink socket of the
        # driver's namespace); a fake together with ``netlink`` and ``runner``
        # runs the platform with no kernel at all.
        self._netlink_writer = netlink_writer
        self._sysctl_root = sysctl_root
        # Where the forwarding values found at start are kept for cleanup
        # (None: in memory only, so a later cleanup cannot restore them).
        self._sysctl_state = sysctl_state
        # Where the pod MTU goes for the CNI plugin (None: nowhere).
        self._mtu_file = MtuFile(mtu_file)
        self.names = ChainNames(chain_prefix)
        self.route_protocol = route_protocol
        self._clock = clock
        self._users: PolicyUsers = NoPolicyUsers()
        self._health = HealthCheckServer()
        self._conntrack = ConntrackCleaner(self._runner)
        self._links = LinkMonitor(netlink)
        self._links_changed = False
        self._wakeup: Callable[[], None] = lambda: None
        self._desired = Desired(self.names, self._conntrack, self._health, self._ipset_name)
        # Programmers, built at the first apply (backend detection is I/O).
        self._ipset_changes = PendingIPSets()
        self._kernel: Programmers | None = None
        self._timers = RefreshTimers(clock)
        self._statuses = EndpointStatuses(self._links)
        self._last_apply = -math.inf
        # The refresher: timers it has yet to read for, its wake-up,
        # and whether it runs (serve); a difference it found wants an apply.
        self._refresh_due: set[str] = set()
        self._refresh_wanted = trio.Event()
        self._refresher_running = False
        self._repair_wanted = False
        # True while apply() runs: the policy counters' save waits for the end.
        self.applying = False
        # Metrics, when bound; the policy counters' labels, when asked for.
        self._meter: LinuxMeter | None = None
        self._labels: RuleLabels | None = None
        self._rule_map: RuleMap = {}

    @property
    def config(self) -> Config:
        return self._desired.config

    # --- configuration and start-up -------------------------------------------------

    def configure(self, config: Config) -> None:
        if self._kernel is not None and (
            config.iptables_backend != self.config.iptables_backend
            or config.ipv6_support != self.config.ipv6_support
            or config.nftables_mode != self.config.nftables_mode
            or config.ip_forwarding != self.config.ip_forwarding
        ):
            log.warning(
                "IptablesBackend/NFTablesMode/Ipv6Support/IPForwarding changes take effect"
                " after a restart"
            )
        self._desired.configure(config)

    async def _start(self) -> Programmers:
        kernel = await Programmers.start(
            self.config,
            self._runner,
            self._netlink,
            self._links,
            prefix=self.names.prefix,
            route_protocol=self.route_protocol,
            sysctl_root=self._sysctl_root,
            sysctl_state=self._sysctl_state,
            clock=self._clock,
            meter=self._meter,
            netlink_writer=self._netlink_writer,
            nftables_mode=self._nftables_mode,
            netns=self._netns,
        )
        self._ipset_changes.replay_into(kernel.ipsets)
        self._timers.start()
        self._kernel = kernel
        return kernel

    def _ipset_name(self, set_id: str, version: int) -> str | None:
        assert self._kernel is not None
        ipsets = self._kernel.ipsets
        return ipsets.kernel_name(set_id, version) if ipsets.wants(set_id) else None

    @property
    def effective_config(self) -> Config:
        """The configuration with the overlays the IP pools use filled in."""
        return self._desired.effective

    # --- apply -------------------------------------------------------------------------

    async def apply(self) -> None:
        """Program everything, in the one order that never leaves a gap.

        1. IP sets: create and fill new sets first -- rules may reference them
           (on nftables while nft reads the rules' script: it commits them after).
        2. Rules: iptables raw, mangle, nat, filter, v4 then v6, one atomic
           restore each; or on nftables our table per family, one
           transaction for both, the services tables written while nft
           reads it. New policy is in force before anything below makes
           a pod reachable.
        3. Routes and interface sysctls: only now are new pods routable.
        4. IP set deletions last: no rule references them any more.
        """
        self.applying = True  # read by the policy counters' thread
        try:
            first = self._kernel is None
            kernel = self._kernel or await self._start()
            fired = self._timers.due()
            # Read beside the applies by the refresher (serve), never here;
            # but the first apply reads every table it writes anyway (it
            # knows nothing of the kernel yet), and a refresh beside it
            # would read each a second time, with the first apply waiting.
            beside = self._refresher_running and not first
            if fired and beside:
                self._refresh_due.update(fired)
                self._refresh_wanted.set()
            kernel.mark_for_resync(fired, read_beside=beside)
            try:
                await self._program(kernel)
            finally:
                self._timers.rearm(fired, self.config)
        finally:
            self.applying = False

    def _write(self, kernel: Programmers) -> OverlayPlan:
        """Let every writer write; the overlay plan they wrote for."""
        return self._desired.write(kernel.tables, kernel.ipsets, kernel.services)

    async def _program(self, kernel: Programmers) -> None:
        # Cleared before writing: drift the refresher finds, or a link that
        # comes or goes, while this apply runs may come after the part it
        # concerns (the routes read the links once), and wants another apply.
        self._repair_wanted = False
        self._links_changed = False
        plan = self._write(kernel)
        try:
            await kernel.apply_rules(
                self._desired.versions(),
                kernel.ipsets.apply_updates,
                functools.partial(self._read_ahead, kernel),
            )
            self._reports().log_refusals(kernel)
            # UDP/SCTP flows to removed backends: only now that the new rules
            # are in force, or the next packet would re-create them.
            await self._conntrack.apply()
            kernel.vxlan.set_plan(plan)
            await kernel.vxlan.apply()
            self._desired.routes.hand_over(plan, kernel.routes)
            await kernel.routes.apply()
            await kernel.sysctls.apply(self._desired.routes.sysctls(kernel.routes.links))
            kernel.shaping.set_plan(self._desired.workloads.shaping())
            await kernel.shaping.apply()
            config = self._desired.effective
            mtu = pod_mtu(host_mtu(kernel.routes.links, config.mtu_iface_pattern), config)
            self._mtu_file.apply(mtu, required=config.require_mtu_file)
            await kernel.ipsets.apply_deletions()
            # After a switch of NFTablesMode: only now that this backend's
            # objects are in force does the other's go.
            await kernel.retire_other(self._runner)
        finally:
            # Said even when a later step failed: a refusal is news either way.
            log_held_back(kernel)
            kernel.sysctls.forget_ahead()  # read for this apply only
        desired = self._desired
        self._statuses.update(
            desired.workloads,
            desired.hosts,
            self._reports().failing(kernel, desired.routes),
        )
        self._last_apply = self._clock()
        if self._meter is not None:
            sized: Mapping[tuple[str, int], Sized] = kernel.iptables or kernel.views
            self._meter.observe(sized, kernel.ipsets.counts(), kernel.sysctls.writes)
        if self._labels is not None:
            self._publish_labels(kernel)

    async def _read_ahead(self, kernel: Programmers) -> None:
        """What the steps after the rules read, read while the kernel takes
        the rules: the links and our routes (once, at a first apply or a
        resync), and the files of the interfaces whose sysctls are due.
        On a node of 1,000 endpoints that took 0.13 s off a first apply.
        What the kernel refuses here, those steps read again, and say."""
        try:
            await trio.to_thread.run_sync(kernel.routes.read_ahead)
            await kernel.sysctls.read_ahead(self._desired.routes.sysctls(kernel.routes.links))
        except KERNEL_ERRORS:
            return

    # --- quarantine and status -----------------------------------------------------------

    def _reports(self) -> Reports:
        desired = self._desired
        return Reports(
            self.names,
            desired.policies,
            desired.workloads,
            desired.hosts,
            desired.services,
            self._users,
        )

    def quarantined(self) -> list[tuple[str, int, str, ChainOwner]]:
        """(table, version, chain, owner) of every chain in quarantine now."""
        return self._reports().quarantined(self._kernel) if self._kernel else []

    def object_errors(self) -> list[ObjectError]:
        """Everything held back now, named by object (see :meth:`Reports.object_errors`)."""
        return self._reports().object_errors(self._kernel) if self._kernel else []

    def endpoint_statuses(self) -> Mapping[EndpointKey, EndpointStatus]:
        return self._statuses.book

    def wants_apply_at(self) -> float:
        kernel = self._kernel
        if kernel is None:
            return math.inf
        refresh = min(
            self._timers.next_due(),
            # Quarantined chains and sets are retried alone when their
            # backoff ends.
            min((t.quarantine.next_retry() for t in kernel.iptables.values()), default=math.inf),
            min((t.quarantine.next_retry() for t in kernel.nft.values()), default=math.inf),
            kernel.ipsets.quarantine.next_retry(),
            kernel.routes.quarantine.next_retry(),
        )
        if self._links_changed or self._repair_wanted:
            # A link came, went or changed state, or a refresh found drift: now.
            return -math.inf
        if kernel.routes.pending or kernel.vxlan.held_back() or kernel.shaping.held_back():
            # Routes wait for interfaces the CNI plugin has not created yet;
            # the link monitor normally wakes us first, this is the backstop.
            return min(refresh, self._last_apply + _PENDING_RETRY_SECONDS)
        return refresh

    def set_wakeup(self, wakeup: Callable[[], None]) -> None:
        """How the platform wakes the main loop when the kernel changes."""
        self._wakeup = wakeup

    def _on_link_change(self) -> None:
        self._links_changed = True
        if self._kernel is not None:
            self._kernel.vxlan.links_changed()
            self._kernel.shaping.links_changed()
        self._wakeup()

    async def serve(self) -> None:
        """Health-check node ports, following the node's links, and reading
        our tables of rules (and native sets) back beside the applies."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._health.serve)
            nursery.start_soon(self._links.watch, self._on_link_change)
            nursery.start_soon(self._refresher)

    async def _refresher(self) -> None:
        """Tamper detection that never holds an apply: when the iptables or
        IP sets refresh timer fires, read our tables or sets back here and
        let the next apply write only what differs."""
        self._refresher_running = True
        try:
            while True:
                await self._refresh_wanted.wait()
                self._refresh_wanted = trio.Event()
                fired, self._refresh_due = self._refresh_due, set()
                kernel = self._kernel
                if kernel is None:
                    continue
                try:
                    differs = await kernel.refresh(fired)
                except _REFRESH_ERRORS as exc:
                    # Not read: the next apply reads instead.
                    log.warning(
                        "refresh beside the applies failed (%s); read at the next apply", exc
                    )
                    kernel.mark_for_resync(fired)
                    differs = True
                if differs:
                    self._repair_wanted = True
                    self._wakeup()
        finally:
            self._refresher_running = False

    # --- cleanup and dumps ---------------------------------------------------------------

    async def cleanup(self, backends: Sequence[str] = ("legacy", "nft")) -> None:
        """Remove everything we own (see :meth:`Programmers.cleanup`)."""
        kernel = self._kernel or await self._start()
        await kernel.cleanup(
            self._runner, self.names.prefix, backends, self.config.interface_prefixes
        )

    @property
    def programmers(self) -> Programmers | None:
        """The programmers, once the first apply built them (for tests and tools: read only)."""
        return self._kernel

    @property
    def backend(self) -> str | None:
        """The backend in use, once the first apply chose it: the iptables
        backend ("legacy", "nft") or "nftables"."""
        return self._kernel.backend if self._kernel else None

    def table_writes(self) -> int:
        """iptables restores, or nft transactions of rules, run so far (observability,
        benchmarks)."""
        if self._kernel is None:
            return 0
        kernel = self._kernel
        return sum(t.writes for t in kernel.iptables.values()) + sum(
            t.writes for t in kernel.nft.values()
        )

    def dump(self) -> str:
        backend = self.backend
        what = "nftables" if backend == "nftables" else f"iptables backend {backend}"
        out = [f"linux platform, {what}"]
        if self._kernel is not None:
            out += self._kernel.dump_tables()
            out += self._desired.dump()
        return "\n".join(out) + "\n"
