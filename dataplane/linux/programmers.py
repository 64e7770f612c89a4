"""Programmers: the only code that writes to the kernel, built at start.

Building them needs I/O (which backend the host can and should use), so
the platform builds them at its first apply. On iptables they are the IP
sets programmer (ipset) and one :class:`Table` per table and IP version;
on nftables (Felix's ``NFTablesMode``) native sets, one table per family
holding all four iptables tables' chains, and the services table per
family. Both have routes over netlink, the interface sysctls and the
VXLAN devices.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dataplane.config import Config
from dataplane.errors import ProgrammingError
from dataplane.linux.ipsets.programmer import IPSetsProgrammer
from dataplane.linux.iptables.backend import IptablesCommands, detect_backend
from dataplane.linux.iptables.chains import IptRule
from dataplane.linux.iptables.serialise import action_text
from dataplane.linux.iptables.table import FAIL_CLOSED, PRELOAD_THRESHOLD, Table
from dataplane.linux.kernel.cmd import CommandRunner
from dataplane.linux.kernel.side_by_side import side_by_side
from dataplane.linux.kernel.sysctl_state import SysctlOriginals, namespace_identity
from dataplane.linux.kernel.sysctls import SysctlWriter
from dataplane.linux.leftovers import remove_ipsets, remove_iptables, remove_nftables
from dataplane.linux.metered import LinuxMeter
from dataplane.linux.netlink.batch import NetlinkBatch, NetlinkWriter
from dataplane.linux.netlink.links import LinkMonitor
from dataplane.linux.netlink.routes import NetlinkHandle, RouteProgrammer
from dataplane.linux.netlink.vxlan import VxlanProgrammer
from dataplane.linux.nftables.mode import nftables_chosen
from dataplane.linux.rules.action import SetMark
from dataplane.linux.rules.marks import Marks
from dataplane.linux.shaping.programmer import ShapingProgrammer
from dataplane.linux.writers.shapes import TABLES, RuleTable, SetProgrammer

if TYPE_CHECKING:
    from dataplane.linux.nftables.service_table import ServiceTable
    from dataplane.linux.nftables.table import NftTable
    from dataplane.linux.nftables.view import NftTableView

__all__ = ["NFTABLES", "TABLES", "HoldsBack", "Programmers"]

NFTABLES = "nftables"  # Programmers.backend on native nftables


class HoldsBack(Protocol):
    """How a programmer says what it could not program (every one but the
    iptables tables, whose refusals carry the rule that was refused)."""

    def held_back(self) -> dict[str, str]:
        """What is not as desired now, and why."""

    def take_refusals(self) -> list[tuple[str, str]]:
        """(what, why) newly held back since the last call: one report each."""


class Programmers:
    """The programmers of one backend, and the shapes the writers write into.

    ``tables`` is what the writers see: each iptables table and version as
    an iptables :class:`Table`, or on nftables as a share of the family's
    one :class:`NftTable` (:class:`NftTableView`). ``iptables`` holds the
    iptables tables (empty on nftables), ``nft`` the nftables table per
    version, ``views`` the writers' shares of them and ``services`` the
    services table per version (all three empty on iptables). ``backend``
    is "legacy" or "nft" (iptables) or "nftables".
    """

    def __init__(  # noqa: PLR0917 - one argument per programmer
        self,
        backend: str,
        ipsets: SetProgrammer,
        tables: Mapping[tuple[str, int], RuleTable[Any]],
        routes: RouteProgrammer,
        sysctls: SysctlWriter,
        vxlan: VxlanProgrammer,
        *,
        shaping: ShapingProgrammer,
        iptables: Mapping[tuple[str, int], Table] | None = None,
        nft: Mapping[int, NftTable] | None = None,
        views: Mapping[tuple[str, int], NftTableView] | None = None,
        services: Mapping[int, ServiceTable] | None = None,
        prefix: str = "cali-",
    ) -> None:
        self.backend = backend
        self.ipsets = ipsets
        self.tables = tables
        self.routes = routes
        self.sysctls = sysctls
        self.vxlan = vxlan
        self.iptables: Mapping[tuple[str, int], Table] = iptables or {}
        self.nft: Mapping[int, NftTable] = nft or {}
        self.views: Mapping[tuple[str, int], NftTableView] = views or {}
        self.services: Mapping[int, ServiceTable] = services or {}
        self.shaping = shaping
        self._prefix = prefix
        # The other backend's objects of ours are removed once, after the
        # first apply has put this backend's in force (see retire_other).
        self.other_retired = False

    @property
    def nftables(self) -> bool:
        return self.backend == NFTABLES

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
        nftables_mode: str | None = None,
        netns: str | None = None,
    ) -> Programmers:
        """Build the programmers of the backend ``NFTablesMode`` chooses
        (``nftables_mode``, the operator's flag, over the config's)."""
        mode = nftables_mode or config.nftables_mode
        versions = (4, 6) if config.ipv6_support else (4,)
        marks = Marks.from_mask(config.iptables_mark_mask)
        if await nftables_chosen(runner, mode, prefix):
            # Imported here: a node on iptables never loads nftables' modules.
            from dataplane.linux.nftables.programmers import NftProgrammers  # noqa: PLC0415

            built = NftProgrammers.build(runner, versions, prefix, marks.masq, clock, netns, TABLES)
            ipsets: SetProgrammer = built.ipsets
            nft, views, services = built.nft, built.views, built.services
            tables: dict[tuple[str, int], RuleTable[Any]] = dict(views)
            backend = NFTABLES
            iptables: dict[tuple[str, int], Table] = {}
        else:
            backend = await detect_backend(runner, config.iptables_backend)
            ipsets = IPSetsProgrammer(
                runner, ipv6=config.ipv6_support, max_size=config.max_ipset_size, clock=clock
            )
            iptables = _iptables(config, runner, backend, prefix, clock, versions)
            tables = dict(iptables)
            nft, views, services = {}, {}, {}
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
        # The records are this namespace's: the file may serve several.
        namespace = namespace_identity() if sysctl_state is not None else ""
        originals = SysctlOriginals(sysctl_state, namespace=namespace)
        sysctls = SysctlWriter(
            sysctl_root,
            ipv6=config.ipv6_support,
            forwarding=config.ip_forwarding,
            originals=originals,
        )
        vxlan = VxlanProgrammer(meter.netlink(netlink) if meter else netlink, links, writer)
        return cls(
            backend,
            ipsets,
            tables,
            routes,
            sysctls,
            vxlan,
            iptables=iptables,
            nft=nft,
            views=views,
            services=services,
            shaping=ShapingProgrammer(runner),
            prefix=prefix,
        )

    async def refresh(self, timers: Iterable[str]) -> bool:
        """Read our tables of rules and our IP sets back beside the applies,
        for the refresh timers that fired; True if something differs (the
        next apply repairs it). Reads run in child processes or netlink
        dumps (the services tables), their parsing in worker threads: the
        loop is never held."""
        fired = set(timers)
        differs = False
        if "iptables" in fired:
            for table in self.iptables.values():
                differs |= await table.refresh()
            for nft in self.nft.values():
                differs |= await nft.refresh()
            for services in self.services.values():
                differs |= await services.refresh()
        # On nftables drift in the table may be the table deleted, and its
        # sets with it.
        if "ipsets" in fired or (differs and self.nftables):
            differs |= await self.ipsets.refresh()
        return differs

    async def apply_rules(
        self,
        versions: Sequence[int],
        ip_sets: Callable[[], Awaitable[None]],
        beside: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """The IP sets' writes (``ip_sets``), then every table of rules, in
        the order that never leaves a gap; ``beside`` (reads for the steps
        after, which never raise what the kernel says) while the kernel
        takes the rules.

        iptables: the sets, then raw, mangle, nat, filter, one restore each,
        the two families side by side (they share nothing, and each restore
        spends most of its time reading the kernel's tables: in turn, a new
        pod waited for both); a family that fails does not stop the other,
        and the first family's error is raised once both are done.
        nftables: the one table per family (all four tables' chains), both
        families in one transaction that nft parses while the sets and
        then the services tables are written, and commits after them. A
        services table refused does not stop the rules: its error is
        raised once they are in.
        """
        if self.nftables:
            # Imported here, as in start: iptables never loads it.
            from dataplane.linux.nftables.together import apply_together  # noqa: PLC0415

            refused: list[ProgrammingError] = []

            async def meanwhile() -> None:
                await ip_sets()
                # The services tables are tables of their own, no rule of
                # ours jumps into them, and nft looks at the kernel only
                # once its input ends: written here, they take none of
                # the apply's time on a node whose rules nft is still
                # parsing (0.2 s of a 1,000-endpoint node's first apply).
                # One family's after the other: two nft runs at once in
                # one namespace, the second finds the ruleset changed
                # under it at its commit and starts again.
                try:
                    for version in versions:
                        await self.services[version].apply()
                except ProgrammingError as exc:
                    refused.append(exc)

            await apply_together([self.nft[v] for v in versions], meanwhile, beside)
            if refused:
                raise refused[0]
            return
        await ip_sets()

        async def family(version: int) -> None:
            for table in TABLES:
                await self.iptables[(table, version)].apply()

        steps = [functools.partial(family, v) for v in versions]
        await side_by_side(*steps, *(() if beside is None else (beside,)))

    async def retire_other(self, runner: CommandRunner) -> None:
        """Remove the other backend's objects of ours, once this one's are in force.

        After a switch of ``NFTablesMode`` both would otherwise judge every
        packet; the new rules went in first, so traffic never meets neither.
        """
        if self.other_retired:
            return
        if self.nftables:
            await remove_iptables(runner, self._prefix, ("legacy", "nft"))
            await remove_ipsets(runner)
        else:
            await remove_nftables(runner, self._prefix)
        self.other_retired = True

    def mark_for_resync(self, timers: Iterable[str], *, read_beside: bool = False) -> None:
        """Re-read the kernel at the next apply, for the refresh timers that fired.

        ``read_beside``: our tables of rules and IP sets are read by
        :meth:`refresh` beside the applies instead (the platform's refresher).
        """
        fired = set(timers)
        if "iptables" in fired and not read_beside:
            for table in self.iptables.values():
                table.mark_for_resync()
            for nft in self.nft.values():
                nft.mark_for_resync()
            for services in self.services.values():
                services.mark_for_resync()
        if "ipsets" in fired and not read_beside:
            self.ipsets.mark_for_resync()
        if "routes" in fired:
            self.routes.mark_for_resync()
            self.sysctls.mark_for_resync()
            self.vxlan.mark_for_resync()
            self.shaping.mark_for_resync()

    async def cleanup(
        self, runner: CommandRunner, prefix: str, backends: Sequence[str], interfaces: Sequence[str]
    ) -> None:
        """Remove everything ours, of both backends: chains, hook rules,
        sets, nftables tables, routes, sysctls.

        Global forwarding goes back to what the driver found, where it
        changed it (see :mod:`dataplane.linux.kernel.sysctl_state`).

        Chains go first, in every listed iptables backend that is installed
        (a host may hold leftovers in both), because the kernel refuses to
        destroy an IP set that a rule still references.
        """
        await remove_iptables(runner, prefix, backends)
        if self.nftables:
            await remove_ipsets(runner)  # the other backend's
        else:
            await self.ipsets.cleanup_all()
        # Native sets go with their table (the rules in it reference them).
        await remove_nftables(runner, prefix)
        await self.routes.cleanup_all()
        await self.vxlan.cleanup_all()
        prefixes = tuple(interfaces)
        await self.shaping.cleanup_all([n for n in self.routes.links if n.startswith(prefixes)])
        await self.sysctls.cleanup(name for name in self.routes.links if name.startswith(prefixes))

    def dump_tables(self) -> list[str]:
        out = []
        for (table, version), programmer in sorted(self.iptables.items()):
            out.append(f"*{table} (IPv{version})")
            for name, rules in sorted(programmer.snapshot().items()):
                out.append(f"  {name}")
                out.extend(f"    {r.text()}" for r in rules)
        for _, nft in sorted(self.nft.items()):
            out.append(f"table {nft.family} {nft.name}")
            for name, chain in sorted(nft.snapshot().items()):
                out.append(f"  {name}")
                out.extend(f"    {r.text}" for r in chain)
        return out


def _iptables(  # noqa: PLR0917 - what one table needs
    config: Config,
    runner: CommandRunner,
    backend: str,
    prefix: str,
    clock: Callable[[], float],
    versions: Sequence[int],
) -> dict[tuple[str, int], Table]:
    # A chain the kernel refuses and that has no last good version is
    # written fail-closed: DROP, except in nat, which cannot drop and
    # sets the mark the filter table drops on instead.
    drop_mark = Marks.from_mask(config.iptables_mark_mask).drop
    fail_closed = {"nat": (IptRule("", action_text(SetMark.on(drop_mark))),)}
    tables = {}
    for version in versions:
        commands = IptablesCommands.for_backend(backend, version)
        for table in TABLES:
            tables[(table, version)] = Table(
                table,
                version,
                runner,
                commands,
                prefix=prefix,
                insert_mode=config.chain_insert_mode,
                # iptables-legacy replaces the whole table at each restore:
                # preloading in batches would rewrite it once per batch
                # (5,000 services: 15 s against 2 s for one restore).
                preload_threshold=PRELOAD_THRESHOLD if backend == "nft" else sys.maxsize,
                fail_closed=fail_closed.get(table, FAIL_CLOSED),
                clock=clock,
            )
    return tables
