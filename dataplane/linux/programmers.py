"""Programmers: the only code that writes to the kernel, built at start.

Building them needs I/O (which iptables backend the host uses), so the
platform builds them at its first apply. They are the IP sets programmer,
one :class:`Table` per table and IP version, routes over netlink and the
interface sysctls and the VXLAN devices.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

from dataplane.config import Config
from dataplane.linux.ipsets.programmer import IPSetsProgrammer
from dataplane.linux.iptables.backend import IptablesCommands, detect_backend
from dataplane.linux.iptables.chains import IptRule
from dataplane.linux.iptables.serialise import action_text
from dataplane.linux.iptables.table import FAIL_CLOSED, Table
from dataplane.linux.kernel.cmd import CommandRunner
from dataplane.linux.kernel.sysctl_state import SysctlOriginals
from dataplane.linux.kernel.sysctls import SysctlWriter
from dataplane.linux.metered import LinuxMeter
from dataplane.linux.netlink.batch import NetlinkBatch, NetlinkWriter
from dataplane.linux.netlink.links import LinkMonitor
from dataplane.linux.netlink.routes import NetlinkHandle, RouteProgrammer
from dataplane.linux.netlink.vxlan import VxlanProgrammer
from dataplane.linux.rules.action import SetMark
from dataplane.linux.rules.marks import Marks

__all__ = ["TABLES", "HoldsBack", "Programmers"]

# The order iptables tables are written in (see LinuxPlatform.apply).
TABLES = ("raw", "mangle", "nat", "filter")


class HoldsBack(Protocol):
    """How a programmer says what it could not program (every one but the
    iptables tables, whose refusals carry the rule that was refused)."""

    def held_back(self) -> dict[str, str]:
        """What is not as desired now, and why."""

    def take_refusals(self) -> list[tuple[str, str]]:
        """(what, why) newly held back since the last call: one report each."""


class Programmers:
    def __init__(  # noqa: PLR0917 - one argument per programmer
        self,
        backend: str,
        ipsets: IPSetsProgrammer,
        tables: dict[tuple[str, int], Table],
        routes: RouteProgrammer,
        sysctls: SysctlWriter,
        vxlan: VxlanProgrammer,
    ) -> None:
        self.backend = backend
        self.ipsets = ipsets
        self.tables = tables
        self.routes = routes
        self.sysctls = sysctls
        self.vxlan = vxlan

    @classmethod
    async def start(
        cls,
        config: Config,
        runner: CommandRunner,
        netlink: Callable[[], NetlinkHandle],
        links: LinkMonitor,
        *,
        prefix: str,
        route_protocol: int,
        sysctl_root: str,
        sysctl_state: Path | None = None,
        clock: Callable[[], float],
        meter: LinuxMeter | None = None,
        netlink_writer: NetlinkWriter | None = None,
    ) -> Programmers:
        backend = await detect_backend(runner, config.iptables_backend)
        ipsets = IPSetsProgrammer(
            runner, ipv6=config.ipv6_support, max_size=config.max_ipset_size, clock=clock
        )
        # A chain the kernel refuses and that has no last good version is
        # written fail-closed: DROP, except in nat, which cannot drop and
        # sets the mark the filter table drops on instead.
        drop_mark = Marks.from_mask(config.iptables_mark_mask).drop
        fail_closed = {"nat": (IptRule("", action_text(SetMark.on(drop_mark))),)}
        tables = {}
        for version in (4, 6) if config.ipv6_support else (4,):
            commands = IptablesCommands.for_backend(backend, version)
            for table in TABLES:
                tables[(table, version)] = Table(
                    table,
                    version,
                    runner,
                    commands,
                    prefix=prefix,
                    insert_mode=config.chain_insert_mode,
                    fail_closed=fail_closed.get(table, FAIL_CLOSED),
                    clock=clock,
                )
        # Netlink writes are counted through these (the runner counts the tools).
        writer: NetlinkWriter = netlink_writer or NetlinkBatch()
        if meter:
            writer = meter.netlink_writer(writer)
        routes = RouteProgrammer(
            netlink,
            links,
            protocol=route_protocol,
            ipv6=config.ipv6_support,
            clock=clock,
            writer=writer,
        )
        originals = SysctlOriginals(sysctl_state)
        sysctls = SysctlWriter(sysctl_root, ipv6=config.ipv6_support, originals=originals)
        vxlan = VxlanProgrammer(meter.netlink(netlink) if meter else netlink, links, writer)
        return cls(backend, ipsets, tables, routes, sysctls, vxlan)

    def mark_for_resync(self, timers: Iterable[str]) -> None:
        """Re-read the kernel at the next apply, for the refresh timers that fired."""
        fired = set(timers)
        if "iptables" in fired:
            for table in self.tables.values():
                table.mark_for_resync()
        if "ipsets" in fired:
            self.ipsets.mark_for_resync()
        if "routes" in fired:
            self.routes.mark_for_resync()
            self.sysctls.mark_for_resync()
            self.vxlan.mark_for_resync()

    async def cleanup(
        self, runner: CommandRunner, prefix: str, backends: Sequence[str], interfaces: Sequence[str]
    ) -> None:
        """Remove everything ours: chains, hook rules, sets, routes, sysctls.

        Global forwarding goes back to what the driver found, where it
        changed it (see :mod:`dataplane.linux.kernel.sysctl_state`).

        Chains go first, in every listed backend that is installed (a host
        may hold leftovers in both), because the kernel refuses to destroy
        an IP set that a rule still references.
        """
        for backend in backends:
            if shutil.which(f"iptables-{backend}-save") is None:
                continue
            for version in (4, 6):
                commands = IptablesCommands.for_backend(backend, version)
                for name in TABLES:
                    table = Table(name, version, runner, commands, prefix=prefix)
                    await table.cleanup_all()
        await self.ipsets.cleanup_all()
        await self.routes.cleanup_all()
        await self.vxlan.cleanup_all()
        prefixes = tuple(interfaces)
        await self.sysctls.cleanup(name for name in self.routes.links if name.startswith(prefixes))

    def dump_tables(self) -> list[str]:
        out = []
        for (table, version), programmer in sorted(self.tables.items()):
            out.append(f"*{table} (IPv{version})")
            for name, rules in sorted(programmer.snapshot().items()):
                out.append(f"  {name}")
                out.extend(f"    {r.text()}" for r in rules)
        return out
