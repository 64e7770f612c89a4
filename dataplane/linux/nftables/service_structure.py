"""The services table's structure: its sets, maps and rules, and the IP pools.

Written with ``nft -f`` (the script of
:func:`~dataplane.linux.nftables.service_rules.structure`) when it is not
found as it would be written, when the pools or the affinity timeouts in
use change; IPv6's affinity records, which nft cannot write, through
netlink after it. Read back, the rules are compared by the comment each
carries, chain by chain, and the pools by their elements.

A mixin over :class:`~dataplane.linux.nftables.service_table.ServiceTable`'s state.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import CommandRunner
from dataplane.linux.nftables.affinity_records import RecordRule, records
from dataplane.linux.nftables.elements import encoded, interval_end
from dataplane.linux.nftables.reader import ReadRule
from dataplane.linux.nftables.rule_messages import rule_message
from dataplane.linux.nftables.service_layout import ServiceLayout
from dataplane.linux.nftables.service_rules import RECORD_CHAIN, expected_rules

__all__ = ["ServiceStructure"]


class ServiceStructure:
    """The structure methods of :class:`~dataplane.linux.nftables.service_table.ServiceTable`."""

    layout: ServiceLayout
    _runner: CommandRunner
    _rules: Callable[[Sequence[bytes]], None] | None
    _pools: tuple[str, ...]
    _timeouts: set[int]
    _structure_written: bool
    _whole: bool

    if TYPE_CHECKING:  # the table's own

        def mark_for_resync(self) -> None: ...

    def set_pools(self, prefixes: Iterable[str]) -> None:
        """The IP pools' prefixes of this family (traffic from them is from pods).

        Raises:
            ValueError: not a prefix of this family (they are written into
                the nft script, so nothing else may pass).
        """
        nets = {ipaddress.ip_network(p, strict=False) for p in prefixes}
        if any(n.version != self.layout.version for n in nets):
            raise ValueError(f"IPv{self.layout.version} pools only: {sorted(map(str, nets))}")
        pools = tuple(str(n) for n in sorted(nets))
        if pools != self._pools:
            self._pools = pools
            self._structure_written = False

    async def _write_structure(self) -> None:
        """The table's sets and rules, re-asserted in one transaction.

        A table of ours whose sets nft will not re-declare (another
        layout's, after an upgrade: a set of another type) is replaced in
        the same transaction and every element written again after it:
        services pause for that one element transaction rather than stay
        on a layout this version cannot program.
        """
        layout = self.layout
        script = layout.structure(self._pools, sorted(self._timeouts))
        result = await self._runner.run(["nft", "-f", "-"], stdin=script.encode(), check=False)
        if result.returncode == 0:
            await self._write_netlink_rules()
            return
        where = f"{layout.family} {layout.table}"
        replace = f"add table {where}\ndelete table {where}\n{script}"
        again = await self._runner.run(["nft", "-f", "-"], stdin=replace.encode(), check=False)
        if again.returncode != 0:
            lines = again.stderr.decode(errors="replace").strip().splitlines()
            raise ProgrammingError(
                f"nft refused the {where} table: "
                + (lines[0] if lines else f"exit {again.returncode}")
            )
        self._whole = True
        await self._write_netlink_rules()

    async def _write_netlink_rules(self) -> None:
        """Fill the chain the script made and flushed for the rules nft
        cannot write (IPv6 affinity records). Between the two transactions
        new clients of an affinity service are balanced without being
        remembered: only when the structure is written (start, resync, a
        new timeout).

        Raises:
            ProgrammingError: the kernel refused them.
        """
        wanted = self._netlink_rules()
        if not wanted or self._rules is None:  # (the second: for the type checker)
            return
        layout = self.layout
        messages = [
            rule_message(layout.nfproto, layout.table, RECORD_CHAIN, r.exprs(), r.comment)
            for r in wanted
        ]
        try:
            self._rules(messages)
        except OSError as exc:
            raise ProgrammingError(
                f"the kernel refused the {layout.family} {layout.table} affinity records: {exc}"
            ) from exc

    def _structure_held(self, rules: Sequence[ReadRule], pools: set[bytes]) -> bool:
        """Whether the kernel holds the rules (by their comments, chain by
        chain, in order) and the IP pools the script would write."""
        held: dict[str, list[str]] = {}
        for rule in rules:
            held.setdefault(rule.chain, []).append(rule.comment)
        script = self.layout.structure(self._pools, sorted(self._timeouts))
        expected = expected_rules(script)
        netlink = self._netlink_rules()
        if netlink:
            expected[RECORD_CHAIN] = [r.comment for r in netlink]
        # nft may add an end at the lowest address (it does when a flush
        # and an add of the set share a transaction): it ends nothing.
        zero_end = interval_end(bytes(4 if self.layout.version == 4 else 16))
        return held == expected and pools - {zero_end} == self._pool_elements()

    def _netlink_rules(self) -> list[RecordRule]:
        """The rules written through netlink after the script: IPv6's
        affinity records, for the timeouts in use (none without a writer
        for them: the chain the script makes then stays empty)."""
        if self.layout.version != 6 or self._rules is None:
            return []
        return records(sorted(self._timeouts))

    def _pool_elements(self) -> set[bytes]:
        """The pools set's elements as the kernel holds the prefixes: a
        start and, unless it runs to the last address, an end per merged range."""
        nets = [ipaddress.ip_network(p) for p in self._pools]
        out: set[bytes] = set()
        for net in ipaddress.collapse_addresses(nets):  # type: ignore[type-var]  # one family
            out.add(encoded(net.network_address.packed))
            if int(net.broadcast_address) < (1 << net.max_prefixlen) - 1:
                out.add(interval_end((net.broadcast_address + 1).packed))
        return out

    async def cleanup(self) -> None:
        """Delete the table (ours alone)."""
        layout = self.layout
        await self._runner.run(["nft", "delete", "table", layout.family, layout.table], check=False)
        self.mark_for_resync()
