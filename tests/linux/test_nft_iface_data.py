"""Endpoints as data on nftables, against the real kernel in a throwaway namespace.

An endpoint whose policy the table already has is element writes only
(no ``nft`` run); when a script runs anyway the verdict elements ride in
it, moved away from a chain before it is deleted; tampered elements are
found by a refresh and written again; a restart onto a correct table
writes nothing.
"""

from __future__ import annotations

import re

import trio

from dataplane.linux.kernel.cmd import ProcessRunner
from dataplane.linux.kernel.netns import socket_in
from dataplane.linux.nftables.elements import (
    NFPROTO_IPV4,
    ElementWriter,
    netfilter_socket,
)
from dataplane.linux.nftables.iface_data import DataSet, InterfaceData
from dataplane.linux.nftables.reader import TableReader
from dataplane.linux.nftables.serialise import NftSerialiser
from dataplane.linux.nftables.set_elements import interface_ranges
from dataplane.linux.nftables.table import NftTable
from dataplane.linux.nftables.view import NftTableView
from dataplane.linux.rules.action import Accept, Dispatch, Drop, Jump
from dataplane.linux.rules.chain import Chain
from dataplane.linux.rules.match import InSet, SetKind, Side
from dataplane.linux.rules.rule import TableRule
from tests.linux.test_nft_table import nft

TABLE = "dp-data"
NFT = NftSerialiser(4, chain_prefix="filter-")
SPOOFED = InSet(Side.SRC, "wl-sources", SetKind.INTERFACE_ADDRESSES, negate=True)


def _view(netns: str) -> NftTableView:
    socket = lambda: socket_in(netns, netfilter_socket)  # noqa: E731
    data = InterfaceData(NFPROTO_IPV4, TABLE, ElementWriter(socket), TableReader(socket))
    view = NftTableView(NftTable("ip", TABLE, ProcessRunner(netns), data=data), "filter", 4)
    view.declare(DataSet("wl-from", "type ifname : verdict"))
    view.declare(DataSet("wl-sources", "type ifname . ipv4_addr; flags interval"))
    view.update_chain(
        Chain(
            "dispatch", NFT.rules([TableRule((), Dispatch("wl-from", True)), TableRule((), Drop())])
        )
    )
    view.set_hooks("FORWARD", NFT.rules([TableRule((), Jump("dispatch"))]))
    return view


def _shared(name: str, *, allow: bool) -> Chain:  # type: ignore[type-arg]
    verdict = Accept() if allow else Drop()
    return Chain(name, NFT.rules([TableRule((SPOOFED,), Drop()), TableRule((), verdict)]))


def _with_allow(netns: str) -> tuple[NftTableView, NftTable, InterfaceData]:
    """A fresh programmer of the table, the shared "allow" chain desired."""
    view = _view(netns)
    assert view.table.data is not None
    view.update_chain(_shared("allow", allow=True))
    return view, view.table, view.table.data


def _endpoint(view: NftTableView, iface: str, chain: str, net: str) -> None:
    view.put_goto("wl-from", iface, chain)
    view.put_elements("wl-sources", iface, interface_ranges(iface, (net,), 4))


def _map(netns: str) -> dict[str, str]:
    listed = nft(netns, "list", "map", "ip", TABLE, "wl-from")
    return dict(re.findall(r'"([^"]+)" : goto (\S+?)(?:,|\s|$)', listed))


def test_an_endpoint_is_elements_and_a_chain_goes_after_its_elements(netns: str) -> None:
    async def main() -> None:
        view, table, data = _with_allow(netns)
        _endpoint(view, "cali1", "allow", "10.0.1.0/24")
        assert await table.apply()
        assert (table.writes, data.writes) == (1, 1)
        assert _map(netns) == {"cali1": "filter-allow"}
        # A second endpoint with the same policy: elements only, no nft run.
        view.update_chain(_shared("allow", allow=True))
        _endpoint(view, "cali2", "allow", "10.0.2.0/24")
        assert await table.apply()
        assert (table.writes, data.writes) == (1, 2)
        sources = nft(netns, "list", "set", "ip", TABLE, "wl-sources")
        assert '"cali2" . 10.0.2.0/24' in sources and '"cali1" . 10.0.1.0/24' in sources
        # Both move to a new chain and the old one goes: one script makes
        # the chain, moves the verdict elements and deletes the old chain
        # (the kernel refuses to delete a chain an element reaches, so the
        # order inside it matters); the changed sources go after it.
        view.update_chain(_shared("deny", allow=False))
        view.remove_chain("allow")
        _endpoint(view, "cali1", "deny", "10.0.1.0/24")
        _endpoint(view, "cali2", "deny", "10.0.3.0/24")
        assert await table.apply()
        assert (table.writes, data.writes) == (2, 3)
        assert _map(netns) == {"cali1": "filter-deny", "cali2": "filter-deny"}
        listed = nft(netns, "list", "table", "ip", TABLE)
        assert "chain filter-allow" not in listed and '"cali2" . 10.0.3.0/24' in listed
        # An endpoint gone: its elements go, nothing else.
        view.put_goto("wl-from", "cali2", None)
        view.put_elements("wl-sources", "cali2", frozenset())
        assert await table.apply()
        assert (table.writes, data.writes) == (2, 4)
        assert _map(netns) == {"cali1": "filter-deny"}
        assert "cali2" not in nft(netns, "list", "set", "ip", TABLE, "wl-sources")

    trio.run(main)


def test_tampered_elements_are_rewritten_and_a_restart_writes_nothing(netns: str) -> None:
    async def main() -> None:
        view, table, _ = _with_allow(netns)
        for i in range(3):
            _endpoint(view, f"cali{i}", "allow", f"10.0.{i}.0/24")
        await table.apply()
        assert not await table.refresh()
        # Someone deletes an endpoint's dispatch element and another's sources.
        nft(netns, "delete", "element", "ip", TABLE, "wl-from", '{ "cali1" }')
        nft(netns, "delete", "element", "ip", TABLE, "wl-sources", '{ "cali2" . 10.0.2.0/24 }')
        assert await table.refresh()
        assert await table.apply()
        assert _map(netns) == {f"cali{i}": "filter-allow" for i in range(3)}
        assert '"cali2" . 10.0.2.0/24' in nft(netns, "list", "set", "ip", TABLE, "wl-sources")
        assert not await table.refresh()
        # The whole table deleted: the sets are declared and filled again.
        nft(netns, "delete", "table", "ip", TABLE)
        assert await table.refresh()
        assert await table.apply()
        assert _map(netns) == {f"cali{i}": "filter-allow" for i in range(3)}
        # A restart with the same desired state writes nothing.
        again, again_table, again_data = _with_allow(netns)
        for i in range(3):
            _endpoint(again, f"cali{i}", "allow", f"10.0.{i}.0/24")
        assert not await again_table.apply()
        assert (again_table.writes, again_data.writes) == (0, 0)

    trio.run(main)
