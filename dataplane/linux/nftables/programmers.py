"""The native nftables backend's programmers, built at the first apply.

Imported only once ``NFTablesMode`` has chosen nftables
(:meth:`dataplane.linux.programmers.Programmers.start`): a node on
iptables, the default, never loads this backend's modules (a start's
imports are most of its time, ``docs/benchmarks.md``, "Process start").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dataplane.linux.kernel.cmd import CommandRunner
from dataplane.linux.kernel.netns import socket_in
from dataplane.linux.nftables.elements import (
    NFPROTO_IPV4,
    NFPROTO_IPV6,
    ElementWriter,
    netfilter_socket,
)
from dataplane.linux.nftables.iface_data import InterfaceData
from dataplane.linux.nftables.names import nft_tables
from dataplane.linux.nftables.reader import TableReader
from dataplane.linux.nftables.service_layout import ServiceLayout
from dataplane.linux.nftables.service_table import ServiceTable
from dataplane.linux.nftables.sets import NftSets
from dataplane.linux.nftables.table import NftTable
from dataplane.linux.nftables.view import NftTableView

__all__ = ["NftProgrammers"]

_FAMILY = {4: "ip", 6: "ip6"}
_NFPROTO = {4: NFPROTO_IPV4, 6: NFPROTO_IPV6}


@dataclass(frozen=True, slots=True)
class NftProgrammers:
    """Native sets, the one table per family with each iptables table's
    share of it, and the services table per family."""

    ipsets: NftSets
    nft: dict[int, NftTable]
    views: dict[tuple[str, int], NftTableView]
    services: dict[int, ServiceTable]

    @classmethod
    def build(  # noqa: PLR0917 - what the backend's programmers need
        cls,
        runner: CommandRunner,
        versions: Sequence[int],
        prefix: str,
        masq_mark: int,
        clock: Callable[[], float],
        netns: str | None,
        tables: Sequence[str],
    ) -> NftProgrammers:
        """``tables``: the iptables tables each family's table holds a share of."""
        sink = ElementWriter(lambda: socket_in(netns, netfilter_socket))
        reader = TableReader(lambda: socket_in(netns, netfilter_socket))
        names = nft_tables(prefix)
        nft = {
            v: NftTable(
                _FAMILY[v],
                names.main,
                runner,
                clock=clock,
                data=InterfaceData(_NFPROTO[v], names.main, sink, reader),
            )
            for v in versions
        }
        ipsets = NftSets(runner, sink, reader, dict.fromkeys(versions, names.main), clock=clock)
        views = {(t, v): NftTableView(nft[v], t, v) for v in versions for t in tables}
        services = {
            v: ServiceTable(
                ServiceLayout(v, names.services, masq_mark),
                runner,
                sink,
                reader,
                sink.send_rules,
            )
            for v in versions
        }
        return cls(ipsets, nft, views, services)
