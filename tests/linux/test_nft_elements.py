"""The nf_tables element writer against the kernel: what ``nft`` lists after it wrote.

The tables, sets and maps are made with ``nft -f`` in a throwaway
namespace, as the backend will make its structure; the writer then adds
and deletes elements of every kind the layout uses (addresses, a
concatenated key with a protocol, a port and a slot, a concatenated
value, an interface name to a verdict), and ``nft`` reads them back. A transaction with one refused
change applies none of its changes.
"""

from __future__ import annotations

import errno
import functools
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataplane.linux.kernel.netns import socket_in
from dataplane.linux.nftables.elements import (
    NFPROTO_IPV4,
    ElementChange,
    ElementWriter,
    concat,
    encode_batch,
    encoded,
    integer,
    netfilter_socket,
    port,
)
from dataplane.linux.nftables.reader import TableReader
from testbed.topology import Topology, kernel_unavailable

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(kernel_unavailable() is not None, reason=str(kernel_unavailable())),
    pytest.mark.skipif(shutil.which("nft") is None, reason="needs nft (nftables)"),
]

RULESET = """
table ip dp-test {
  set addrs { type ipv4_addr; }
  map dispatch { type ifname : verdict; }
  chain cali-a { }
  chain cali-b { }
  chain from-pods { iifname vmap @dispatch; }
  map backends {
    typeof ip daddr . meta l4proto . th dport . numgen random mod 2 : ip daddr . th dport
  }
}
table ip6 dp-test6 {
  set addrs { type ipv6_addr; }
}
"""

_WRITE = """
import json, sys
from dataplane.linux.nftables.elements import (
    NFPROTO_IPV4, NFPROTO_IPV6, Element, ElementChange, ElementWriter, Verdict, addr, ifname,
    integer, port, proto,
)

def backend(vip, slot, ip, number):
    return Element((addr(vip), proto(6), port(80), integer(slot)), (addr(ip), port(number)))

steps = {
    "add": [
        ElementChange("add", NFPROTO_IPV4, "dp-test", "addrs",
                      tuple(Element((addr(f"10.0.0.{i}"),)) for i in range(1, 4))),
        ElementChange("add", NFPROTO_IPV6, "dp-test6", "addrs", (Element((addr("fd00::1"),)),)),
        ElementChange("add", NFPROTO_IPV4, "dp-test", "backends", (
            backend("10.96.0.10", 0, "10.65.0.10", 8080),
            backend("10.96.0.10", 1, "10.65.0.11", 8080),
        )),
    ],
    # One backend replaced: the old element out, the new in, one transaction.
    "swap": [
        ElementChange("delete", NFPROTO_IPV4, "dp-test", "backends",
                      (backend("10.96.0.10", 1, "10.65.0.11", 8080),)),
        ElementChange("add", NFPROTO_IPV4, "dp-test", "backends",
                      (backend("10.96.0.10", 1, "10.65.0.12", 9090),)),
        ElementChange("delete", NFPROTO_IPV4, "dp-test", "addrs", (Element((addr("10.0.0.2"),)),)),
    ],
    # Endpoint dispatch: interface to its chain, verdicts as map values.
    "verdicts": [
        ElementChange("add", NFPROTO_IPV4, "dp-test", "dispatch", (
            Element((ifname("cali1"),), verdict=Verdict("goto", "cali-a")),
            Element((ifname("cali2"),), verdict=Verdict("jump", "cali-b")),
        )),
    ],
    # A verdict to a chain that does not exist is refused.
    "nowhere": [
        ElementChange("add", NFPROTO_IPV4, "dp-test", "dispatch", (
            Element((ifname("cali3"),), verdict=Verdict("goto", "cali-nowhere")),
        )),
    ],
    # The second change deletes what is not there: the first must not land.
    "refused": [
        ElementChange("add", NFPROTO_IPV4, "dp-test", "addrs", (Element((addr("10.0.0.9"),)),)),
        ElementChange("delete", NFPROTO_IPV4, "dp-test", "addrs", (Element((addr("10.0.0.7"),)),)),
    ],
}
changes = steps[sys.argv[1]]
try:
    # An iterator, read once, as a whole write hands them over; or the list.
    ElementWriter()(iter(changes) if sys.argv[2:] == ["iterator"] else changes)
    print(json.dumps(None))
except OSError as exc:
    print(json.dumps([exc.errno, str(exc)]))
"""


def _write(netns: str, step: str, *how: str) -> Any:
    argv = ["ip", "netns", "exec", netns, sys.executable, "-c", _WRITE, step, *how]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(done.stdout)


def _elements(
    topology: Topology, netns: str, family: str, table: str, name: str, *, what: str = "set"
) -> list[Any]:
    listed = topology.run(netns, "nft", "-j", "list", what, family, table, name).stdout
    for item in json.loads(listed)["nftables"]:
        for kind in ("set", "map"):
            if kind in item:
                return list(item[kind].get("elem", []))
    raise AssertionError(f"no set {name} in {listed}")


def _backends(topology: Topology, netns: str) -> dict[int, tuple[str, int]]:
    listed = topology.run(netns, "nft", "-j", "list", "map", "ip", "dp-test", "backends").stdout
    elements = next(i["map"] for i in json.loads(listed)["nftables"] if "map" in i)["elem"]
    out = {}
    for key, value in elements:
        vip, protocol, dport, slot = key["concat"]
        assert (vip, protocol, dport) == ("10.96.0.10", "tcp", 80)
        out[slot] = tuple(value["concat"])
    return out


def test_elements_land_as_nft_reads_them_and_a_refusal_lands_nothing() -> None:
    with Topology() as topology:
        netns = topology.new_netns("nfe")
        topology.run(netns, "nft", "-f", "-", stdin=RULESET)
        assert _write(netns, "add") is None
        assert _elements(topology, netns, "ip", "dp-test", "addrs") == [
            "10.0.0.1",
            "10.0.0.2",
            "10.0.0.3",
        ]
        assert _elements(topology, netns, "ip6", "dp-test6", "addrs") == ["fd00::1"]
        assert _backends(topology, netns) == {0: ("10.65.0.10", 8080), 1: ("10.65.0.11", 8080)}

        assert _write(netns, "swap") is None
        assert _backends(topology, netns) == {0: ("10.65.0.10", 8080), 1: ("10.65.0.12", 9090)}
        assert _elements(topology, netns, "ip", "dp-test", "addrs") == ["10.0.0.1", "10.0.0.3"]

        assert _write(netns, "verdicts") is None
        assert _elements(topology, netns, "ip", "dp-test", "dispatch", what="map") == [
            ["cali1", {"goto": {"target": "cali-a"}}],
            ["cali2", {"jump": {"target": "cali-b"}}],
        ]
        code, _ = _write(netns, "nowhere")
        assert code == 2  # ENOENT: no such chain
        assert len(_elements(topology, netns, "ip", "dp-test", "dispatch", what="map")) == 2

        code, message = _write(netns, "refused")
        assert code == 2  # ENOENT: the element to delete is not there
        assert "change 1 (delete of 1 elements in dp-test addrs)" in message
        assert _elements(topology, netns, "ip", "dp-test", "addrs") == ["10.0.0.1", "10.0.0.3"]
        # The same changes as an iterator: the refusal names the change all the same.
        assert _write(netns, "refused", "iterator") == [code, message]
        assert _elements(topology, netns, "ip", "dp-test", "addrs") == ["10.0.0.1", "10.0.0.3"]


def test_the_batch_is_one_transaction_of_acknowledged_changes() -> None:
    """Without a kernel: the framing nfnetlink expects, sequence numbers in order."""
    from dataplane.linux.nftables.elements import (  # noqa: PLC0415
        NFPROTO_IPV4,
        Element,
        ElementChange,
        addr,
    )

    change = ElementChange("add", NFPROTO_IPV4, "t", "s", (Element((addr("10.0.0.1"),)),))
    data, owners = encode_batch([change, change], first_seq=5)
    kinds, seqs, _ = _framing(data)
    assert kinds == [0x10, (10 << 8) | 12, (10 << 8) | 12, 0x11]
    assert seqs[1:] == [5, 6, 7]
    assert owners == [0, 1]


def _framing(data: bytes | bytearray) -> tuple[list[int], list[int], list[int]]:
    kinds, seqs, lengths, offset = [], [], [], 0
    while offset < len(data):
        length = int.from_bytes(data[offset : offset + 4], sys.byteorder)
        kinds.append(int.from_bytes(data[offset + 4 : offset + 6], sys.byteorder))
        seqs.append(int.from_bytes(data[offset + 8 : offset + 12], sys.byteorder))
        lengths.append(length)
        offset += (length + 3) & ~3
    return kinds, seqs, lengths


def test_a_large_change_is_split_and_a_flush_names_no_elements() -> None:
    """An attribute's length is 16 bits: 5,000 elements take several messages."""
    from dataplane.linux.nftables.elements import (  # noqa: PLC0415
        NFPROTO_IPV4,
        Element,
        ElementChange,
        addr,
        port,
    )

    many = tuple(Element((addr(f"10.0.{i // 256}.{i % 256}"), port(80))) for i in range(5000))
    flush = ElementChange("flush", NFPROTO_IPV4, "t", "s", ())
    data, owners = encode_batch([flush, ElementChange("add", NFPROTO_IPV4, "t", "s", many)])
    kinds, seqs, lengths = _framing(data)
    assert owners[0] == 0 and set(owners[1:]) == {1} and len(owners) > 2
    assert kinds[1] == (10 << 8) | 14 and set(kinds[2:-1]) == {(10 << 8) | 12}
    assert seqs[1:] == list(range(1, len(owners) + 2))
    assert max(lengths) < 65536
    with pytest.raises(ValueError, match="flush names no elements"):
        encode_batch([ElementChange("flush", NFPROTO_IPV4, "t", "s", many[:1])])


@given(st.binary(min_size=1, max_size=40), st.binary(max_size=40))
def test_encoded_elements_nest_as_netlink_attributes(key: bytes, data: bytes) -> None:
    """The fast encoding is the attribute nesting spelled out: element(key(value), data(value))."""
    from dataplane.linux.nftables.elements import encoded  # noqa: PLC0415

    def attr(kind: int, payload: bytes, nested: bool = False) -> bytes:
        size = 4 + len(payload)
        head = size.to_bytes(2, sys.byteorder) + (kind | (0x8000 if nested else 0)).to_bytes(
            2, sys.byteorder
        )
        return head + payload + b"\0" * (-size % 4)

    body = attr(1, attr(1, key), nested=True)  # NFTA_SET_ELEM_KEY { NFTA_DATA_VALUE }
    if data:
        body += attr(2, attr(1, data), nested=True)  # NFTA_SET_ELEM_DATA { NFTA_DATA_VALUE }
    assert encoded(key, data) == attr(1, body, nested=True)  # NFTA_LIST_ELEM


@given(st.lists(st.tuples(st.binary(min_size=1, max_size=40), st.binary(max_size=40)), max_size=5))
def test_an_encoder_of_one_shape_encodes_as_encoded_does(pairs: list[tuple[bytes, bytes]]) -> None:
    from dataplane.linux.nftables.elements import encoded, encoder  # noqa: PLC0415

    for key, data in pairs:
        assert encoder(len(key), len(data))(key, data) == encoded(key, data)


_INTERVALS = """
import sys
from dataplane.linux.nftables.elements import (
    NFPROTO_IPV4, ElementChange, ElementWriter, addr, interval,
)

def net(start, end):
    return interval(addr(start).value, addr(end).value if end else None)

ranges = {
    "10/8": net("10.0.0.0", "11.0.0.0"),
    "192.168.1/24": net("192.168.1.0", "192.168.2.0"),
    "top": net("255.255.255.0", None),
}
op, names = sys.argv[1], sys.argv[2].split(",")
elements = tuple(e for n in names for e in ranges[n])
ElementWriter()([ElementChange(op, NFPROTO_IPV4, "dp-int", "nets", elements)])
"""


def test_interval_elements_make_ranges_a_lookup_finds(module_netns: str) -> None:
    """Single-field interval sets: a start element, an end element past the
    range flagged as its end (none for a range to the last address)."""

    def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", module_netns, *argv],
            capture_output=True,
            text=True,
            check=check,
            cwd=REPO,
        )

    def found(address: str) -> bool:
        return (
            run(
                "nft", "get", "element", "ip", "dp-int", "nets", f"{{ {address} }}", check=False
            ).returncode
            == 0
        )

    run("nft", "add", "table", "ip", "dp-int")
    run("nft", "add", "set", "ip", "dp-int", "nets", "{ type ipv4_addr; flags interval; }")
    try:
        run(sys.executable, "-c", _INTERVALS, "add", "10/8,192.168.1/24,top")
        listed = run("nft", "list", "set", "ip", "dp-int", "nets").stdout
        assert "10.0.0.0/8" in listed and "192.168.1.0/24" in listed
        assert "255.255.255.0/24" in listed
        assert found("10.200.3.4") and found("192.168.1.255") and found("255.255.255.255")
        assert not found("11.0.0.0") and not found("192.168.2.0") and not found("9.255.255.255")
        run(sys.executable, "-c", _INTERVALS, "delete", "10/8")
        assert not found("10.200.3.4") and found("192.168.1.7")
    finally:
        run("nft", "delete", "table", "ip", "dp-int", check=False)


@pytest.mark.parametrize("count", [0, 1, 3000])
def test_a_map_reads_back_as_written(module_netns: str, count: int) -> None:
    """The dump answers every element (thousands span several datagrams)
    as the writer encoded it; a set that is not there is ENOENT."""
    sock = functools.partial(socket_in, module_netns, netfilter_socket)
    run = functools.partial(subprocess.run, ["ip", "netns", "exec", module_netns, "nft", "-f", "-"])
    run(
        # Sized: a hash set the kernel grows in the background (after a
        # large add) may be walked mid-resize, and a dump then misses some.
        input="add table ip dp-read\nadd map ip dp-read m { type ipv4_addr . inet_service :"
        " ipv4_addr; size 65536; }\nflush map ip dp-read m\n",
        text=True,
        check=True,
    )
    try:
        draw = random.Random(count)
        elements = {
            concat((integer(draw.getrandbits(32)), port(i % 65535 + 1))): integer(i).value
            for i in range(count)
        }
        change = [
            ElementChange(
                "add",
                NFPROTO_IPV4,
                "dp-read",
                "m",
                tuple(encoded(k, v) for k, v in elements.items()),
            )
        ]
        if elements:
            ElementWriter(sock)(change)
        held = list(TableReader(sock).elements(NFPROTO_IPV4, "dp-read", "m"))
        assert {e.key: e.data for e in held} == elements
        assert {e.encoded() for e in held} == {encoded(k, v) for k, v in elements.items()}
        with pytest.raises(OSError) as refused:
            list(TableReader(sock).elements(NFPROTO_IPV4, "dp-read", "nothing"))
        assert refused.value.errno == errno.ENOENT
    finally:
        run(input="delete table ip dp-read\n", text=True, check=False)
