"""Native nftables IP sets: members as elements, and the programmer, on the fake and the kernel.

Without a kernel: names nft can spell, merged ranges for prefix sets, and
the programmer against the kernel-like fake of ``test_service_layout``
(deltas only, a refused set quarantined while the others land). With a
kernel, in a throwaway namespace: what ``nft get element`` finds after
each change, a set deleted behind our back quarantined and then repaired
by a resync, sets no longer wanted deleted.
"""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Iterable

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import ProcessRunner
from dataplane.linux.kernel.netns import socket_in
from dataplane.linux.nftables.elements import (
    ElementChange,
    ElementWriter,
    encoded,
    interval,
    netfilter_socket,
)
from dataplane.linux.nftables.names import nft_name
from dataplane.linux.nftables.reader import TableReader
from dataplane.linux.nftables.set_elements import (
    elements_of,
    expand,
    held_items,
    member_version,
    set_name,
)
from dataplane.linux.nftables.sets import NftSets
from dataplane.model import IPSet, IPSetType
from testbed.topology import kernel_unavailable
from tests.linux.held_reads import HeldSource, write_during_a_read
from tests.linux.test_service_layout import FakeSets, Nft


def v4(text: str) -> bytes:
    return ipaddress.IPv4Address(text).packed


@given(st.text(min_size=1, max_size=80))
def test_every_set_id_gets_a_name_nft_can_spell_and_no_two_meet(set_id: str) -> None:
    name = set_name(set_id, 4, IPSetType.NET)
    assert nft_name(name) == name
    assert set_name(set_id, 6, IPSetType.NET) != name != set_name(set_id, 4, IPSetType.IP)
    other = set_id + "x"
    assert set_name(other, 4, IPSetType.NET) != name


def test_prefixes_become_merged_ranges_each_one_item() -> None:
    got = elements_of(
        IPSetType.NET, 4, ["10.0.0.0/24", "10.0.1.0/24", "10.0.0.128/25", "10.9.0.1/32"]
    )
    want = {
        b"".join(interval(v4("10.0.0.0"), v4("10.0.2.0"))),  # touching and nested: one range
        b"".join(interval(v4("10.9.0.1"), v4("10.9.0.2"))),
    }
    assert got == want
    assert set(expand(got)) == {
        *interval(v4("10.0.0.0"), v4("10.0.2.0")),
        *interval(v4("10.9.0.1"), v4("10.9.0.2")),
    }
    assert elements_of(IPSetType.NET, 4, ["0.0.0.0/0"]) == set(interval(v4("0.0.0.0"), None))
    assert elements_of(IPSetType.IP, 4, ["10.0.0.1"]) == {encoded(v4("10.0.0.1"))}


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([IPSetType.IP, IPSetType.NET, IPSetType.IP_AND_PORT]),
    st.frozensets(st.integers(0, 2**16 - 1), max_size=12),
    st.sampled_from([8, 16, 24, 30, 32]),
)
def test_what_a_netlink_dump_reads_back_is_the_items_written(
    kind: IPSetType, numbers: frozenset[int], length: int
) -> None:
    """Elements written and read back as a dump answers (the fake keeps them
    as the kernel does: a range as a start and an end element) are the
    items they were written from; so is a prefix set's range running to the
    last address (no end element)."""
    if kind is IPSetType.IP:
        members = [f"10.0.{n >> 8}.{n & 255}" for n in numbers]
    elif kind is IPSetType.IP_AND_PORT:
        members = [f"10.0.0.{n & 255},{('tcp', 'udp')[n & 1]}:{n}" for n in numbers]
    else:
        members = [
            str(ipaddress.ip_network(f"{n >> 8}.{n & 255}.0.0/{length}", strict=False))
            for n in numbers
        ]
        members += ["255.255.255.0/24"] if numbers and min(numbers) & 1 else []
    items = elements_of(kind, 4, members)
    fake = FakeSets()
    fake([ElementChange("add", 2, "calico", "s", expand(items))])
    assert held_items(kind, fake.elements(2, "calico", "s")) == items


class Recording:
    def __init__(self, fake: FakeSets) -> None:
        self.fake = fake
        self.transactions: list[list[tuple[str, str, int]]] = []

    def __call__(self, changes: Iterable[ElementChange]) -> None:
        changes = list(changes)  # (read twice)
        self.transactions.append(sorted((c.op, c.set, len(c.elements)) for c in changes))
        self.fake(changes)


_POOLS = {
    IPSetType.IP: ["10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::1", "fd00::2"],
    IPSetType.IP_AND_PORT: [
        "10.0.0.1,tcp:80",
        "10.0.0.1,udp:80",
        "10.0.0.2,tcp:80",
        "fd00::1,tcp:443",
    ],
    IPSetType.NET: ["10.0.0.0/24", "10.0.1.0/24", "10.0.0.128/25", "fd00::/64", "fd00:0:0:1::/64"],
}
_kernel_ops = st.lists(
    st.one_of(
        st.tuples(st.just("replace"), st.sampled_from(sorted(_POOLS, key=str)), st.integers(0, 31)),
        st.tuples(st.just("update"), st.integers(0, 31), st.integers(0, 31)),
        # What became of the last plan's write, then the next plan:
        st.tuples(
            st.just("plan"),
            st.sampled_from(["landed", "refused", "read back equal", "tampered"]),
            st.integers(0, 31),
        ),
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(_kernel_ops, st.sampled_from([(4,), (4, 6)]))
def test_a_plan_writes_exactly_what_differs_from_the_kernels_copy(
    ops: list[tuple[str, object, int]], versions: tuple[int, ...]
) -> None:
    """A set's items, worked out once and then kept as members come and go
    (added twice, removed though absent, of a family not programmed, of a
    prefix set), are at every plan what its members make whole. And
    whatever became of the last write -- it landed, was refused, or a
    read back replaced the kernel's copy with an equal one or with one
    someone changed -- the plan deletes exactly what that copy holds and
    the members do not make, and adds exactly the reverse (a kept set's
    record of its changes never stands in for a copy it was not made
    against)."""
    fake = FakeSets()
    sets = NftSets(Nft(), fake, fake, dict.fromkeys(versions, "calico"))
    kind, members = IPSetType.IP, set[str]()
    held: dict[tuple[int, str], frozenset[bytes]] = {}
    written: dict[tuple[int, str], frozenset[bytes]] = {}

    def pick(mask: int) -> frozenset[str]:
        return frozenset(m for bit, m in enumerate(_POOLS[kind]) if mask >> bit & 1)

    sets.replace(IPSet("s", kind, frozenset()))
    for op, arg, mask in ops:
        if op == "replace":
            assert isinstance(arg, IPSetType)
            kind = arg
            members = set(pick(mask))
            sets.replace(IPSet("s", kind, frozenset(members)))
            continue
        if op == "update":
            assert isinstance(arg, int)
            added, removed = pick(arg), pick(mask)
            sets.update_members("s", added, removed)
            members = (members - removed) | added
            continue
        if arg == "landed":
            held.update(written)
        elif arg == "read back equal":
            held = {k: frozenset(v) for k, v in held.items()}
        elif arg == "tampered" and held:
            key = sorted(held)[mask % len(held)]
            foreign = elements_of(IPSetType.IP, key[0], ["10.9.9.9" if key[0] == 4 else "fd09::9"])
            held[key] = (held[key] - {min(held[key], default=b"")}) | foreign
        changes, written = sets._plan(held, "s")
        expected: dict[tuple[str, str], list[bytes]] = {}
        for v in versions:
            name = sets.kernel_name("s", v)
            want = elements_of(kind, v, [m for m in members if member_version(m) == v])
            have = held.get((v, name), frozenset())
            assert written.get((v, name), have) == want  # what the kernel then holds
            for change, items in (("delete", have - want), ("add", want - have)):
                if items:
                    expected[(change, name)] = sorted(expand(items))
        assert {(c.op, c.set): sorted(c.elements) for c in changes} == expected  # type: ignore[type-var]


def test_only_a_set_changed_since_it_was_made_keeps_its_items() -> None:
    """Most sets never change after they are made: they keep no items
    (about 240 bytes a prefix). Once one changes, its next plan works them
    out whole and keeps them for the changes after."""
    fake = FakeSets()
    sets = NftSets(Nft(), fake, fake, {4: "calico"})
    sets.replace(IPSet("a", IPSetType.IP, frozenset({"10.0.0.1"})))
    sets.replace(IPSet("n", IPSetType.NET, frozenset({"10.0.0.0/24"})))
    for set_id in ("a", "n"):
        sets._plan({}, set_id)
    assert [(w.items, w.prefixes) for w in sets._wanted.values()] == [({}, {}), ({}, {})]
    sets.update_members("a", frozenset({"10.0.0.2"}), frozenset())
    sets.update_members("n", frozenset({"10.0.1.0/24"}), frozenset())
    for set_id in ("a", "n"):
        sets._plan({}, set_id)
    assert set(sets._wanted["a"].items) == {4} and set(sets._wanted["n"].prefixes) == {4}


def test_changes_are_deltas_and_a_refused_set_waits_while_the_others_land() -> None:
    now = [0.0]
    fake = FakeSets()
    writer = Recording(fake)
    sets = NftSets(Nft(), writer, fake, {4: "calico"}, clock=lambda: now[0])
    sets.replace(IPSet("a", IPSetType.IP, frozenset({"10.0.0.1", "10.0.0.2", "fd00::1"})))
    sets.replace(IPSet("b", IPSetType.NET, frozenset({"10.1.0.0/16"})))
    trio.run(sets.apply_updates)
    a, b = sets.kernel_name("a", 4), sets.kernel_name("b", 4)
    assert fake.contents() == {
        a: {encoded(v4("10.0.0.1")), encoded(v4("10.0.0.2"))},  # IPv6 off: its member ignored
        b: set(interval(v4("10.1.0.0"), v4("10.2.0.0"))),
    }
    writer.transactions.clear()
    sets.update_members("a", frozenset({"10.0.0.3"}), frozenset({"10.0.0.1"}))
    trio.run(sets.apply_updates)
    assert writer.transactions == [[("add", a, 1), ("delete", a, 1)]]

    # The kernel refuses b's change alone: b waits, a lands.
    def refuse_b(changes: Iterable[ElementChange]) -> None:
        changes = list(changes)  # (read twice)
        if any(c.set == b for c in changes):
            raise OSError(2, "no such set")
        fake(changes)

    sets._writer = refuse_b
    sets.update_members("a", frozenset({"10.0.0.4"}), frozenset())
    sets.update_members("b", frozenset({"10.3.0.0/16"}), frozenset())
    trio.run(sets.apply_updates)
    assert encoded(v4("10.0.0.4")) in fake.contents()[a]
    assert set(sets.held_back()) == {"b"}
    assert [i for i, _ in sets.take_refusals()] == ["b"] and sets.take_refusals() == []
    # Every set refused: the kernel's fault, not a set's: the apply fails.
    sets.update_members("a", frozenset({"10.0.0.5"}), frozenset())
    sets._writer = lambda changes: (_ for _ in ()).throw(OSError(12, "no memory"))
    sets.replace(IPSet("c", IPSetType.IP, frozenset({"10.0.0.9"})))
    with pytest.raises(ProgrammingError, match="refused every IP set"):
        trio.run(sets.apply_updates)
    # The retry, when due, writes b whole (what it holds was unknown).
    sets._writer = writer
    now[0] += 3600
    trio.run(sets.apply_updates)
    assert sets.held_back() == {}
    assert fake.contents()[b] == {
        *interval(v4("10.1.0.0"), v4("10.2.0.0")),
        *interval(v4("10.3.0.0"), v4("10.4.0.0")),
    }


# --- the kernel ---------------------------------------------------------------------------

kernel = pytest.mark.skipif(kernel_unavailable() is not None, reason=str(kernel_unavailable()))


def _has(netns: str, family: str, name: str, element: str) -> bool:
    argv = ["ip", "netns", "exec", netns, "nft", "get", "element", family, "calico", name]
    return (
        subprocess.run([*argv, f"{{ {element} }}"], capture_output=True, check=False).returncode
        == 0
    )


def _sets(netns: str) -> str:
    argv = ["ip", "netns", "exec", netns, "nft", "-t", "list", "sets"]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


@kernel
def test_native_sets_hold_what_is_wanted_and_resync_repairs_them(netns: str) -> None:
    writer = ElementWriter(lambda: socket_in(netns, netfilter_socket))
    reader = TableReader(lambda: socket_in(netns, netfilter_socket))
    sets = NftSets(ProcessRunner(netns), writer, reader, {4: "calico", 6: "calico"})
    sets.replace(IPSet("s:web", IPSetType.IP, frozenset({"10.0.0.1", "fd00::1"})))
    sets.replace(IPSet("nets", IPSetType.NET, frozenset({"10.1.0.0/16", "10.2.0.0/16"})))
    sets.replace(IPSet("ports", IPSetType.IP_AND_PORT, frozenset({"10.0.0.1,tcp:80"})))

    async def apply() -> None:
        await sets.apply_updates()
        await sets.apply_deletions()

    trio.run(apply)
    web, nets, ports = (sets.kernel_name(i, 4) for i in ("s:web", "nets", "ports"))
    assert _has(netns, "ip", web, "10.0.0.1") and not _has(netns, "ip", web, "10.0.0.2")
    assert _has(netns, "ip6", sets.kernel_name("s:web", 6), "fd00::1")
    assert _has(netns, "ip", nets, "10.2.255.255") and not _has(netns, "ip", nets, "10.3.0.0")
    assert _has(netns, "ip", ports, "10.0.0.1 . tcp . 80")
    assert not _has(netns, "ip", ports, "10.0.0.1 . udp . 80")

    # Deltas: a range split in two by a removed member, an address gone.
    sets.update_members("nets", frozenset({"10.5.0.0/16"}), frozenset({"10.1.0.0/16"}))
    sets.update_members("s:web", frozenset(), frozenset({"10.0.0.1"}))
    trio.run(apply)
    assert not _has(netns, "ip", nets, "10.1.0.1") and _has(netns, "ip", nets, "10.2.0.1")
    assert _has(netns, "ip", nets, "10.5.0.1") and not _has(netns, "ip", web, "10.0.0.1")

    # A set deleted behind our back: its change is refused alone, it waits.
    subprocess.run(
        ["ip", "netns", "exec", netns, "nft", "delete", "set", "ip", "calico", web], check=True
    )
    sets.update_members("s:web", frozenset({"10.0.0.7"}), frozenset())
    sets.update_members("nets", frozenset({"10.6.0.0/16"}), frozenset())
    trio.run(apply)
    assert _has(netns, "ip", nets, "10.6.0.1")
    assert set(sets.held_back()) == {"s:web"}
    # A resync lists the sets again and writes every one whole.
    subprocess.run(
        ["ip", "netns", "exec", netns, "nft", "flush", "set", "ip", "calico", nets], check=True
    )
    sets.mark_for_resync()
    sets.replace(IPSet("s:web", IPSetType.IP, frozenset({"10.0.0.7"})))  # (a new value: released)
    trio.run(apply)
    assert _has(netns, "ip", web, "10.0.0.7") and _has(netns, "ip", nets, "10.6.0.1")
    assert sets.held_back() == {}

    # Not wanted any more: deleted; nothing else in the table is.
    sets.remove("ports")
    trio.run(apply)
    assert ports not in _sets(netns) and nets in _sets(netns)
    trio.run(sets.cleanup_all)
    assert "cali4" not in _sets(netns) and "cali6" not in _sets(netns)


@kernel
def test_a_refresh_beside_the_applies_finds_tampering_and_never_takes_back_a_write(
    netns: str,
) -> None:
    writer = ElementWriter(lambda: socket_in(netns, netfilter_socket))
    reader = HeldSource(TableReader(lambda: socket_in(netns, netfilter_socket)))
    sets = NftSets(ProcessRunner(netns), writer, reader, {4: "calico"})
    sets.replace(IPSet("s:web", IPSetType.IP, frozenset({"10.0.0.1", "10.0.0.2"})))
    sets.replace(IPSet("nets", IPSetType.NET, frozenset({"10.1.0.0/16"})))
    web, nets = (sets.kernel_name(i, 4) for i in ("s:web", "nets"))

    def nft(*args: str) -> None:
        subprocess.run(["ip", "netns", "exec", netns, "nft", *args], check=True)

    async def scenario() -> None:
        await sets.apply_updates()
        # As the kernel was left: nothing differs, the next apply writes nothing.
        assert not await sets.refresh()
        writes = sets.writes
        await sets.apply_updates()
        assert sets.writes == writes
        # Someone deletes an element and flushes a set.
        nft("delete", "element", "ip", "calico", web, "{ 10.0.0.2 }")
        nft("flush", "set", "ip", "calico", nets)
        assert await sets.refresh()
        await sets.apply_updates()
        assert _has(netns, "ip", web, "10.0.0.2") and _has(netns, "ip", nets, "10.1.2.3")
        assert not await sets.refresh()

        # A read that was taken before a write keeps its hands off that set:
        # the listing is held back until the write has landed.
        async def write() -> None:  # 10.0.0.3: not in the listing
            sets.update_members("s:web", frozenset({"10.0.0.3"}), frozenset())
            await sets.apply_updates()

        await write_during_a_read(reader, sets.refresh, write)
        writes = sets.writes
        await sets.apply_updates()
        assert sets.writes == writes  # nothing taken back, nothing to write again
        assert _has(netns, "ip", web, "10.0.0.3")
        assert not await sets.refresh()

    trio.run(scenario)


prefixes = st.builds(
    lambda a, b, length: str(ipaddress.ip_network(f"10.{a}.{b}.0/{length}", strict=False)),
    st.integers(0, 3),
    st.integers(0, 255),
    st.sampled_from([8, 14, 15, 16, 22, 23, 24, 32]),
)


@kernel
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(st.frozensets(prefixes, max_size=4), st.frozensets(prefixes, max_size=4)),
        max_size=8,
    )
)
def test_prefix_sets_follow_any_member_changes(
    module_netns: str, changes: list[tuple[frozenset[str], frozenset[str]]]
) -> None:
    """Ranges merge, split and touch as members come and go: after every
    apply the kernel's set is the wanted ranges and nothing was refused."""
    writer = ElementWriter(lambda: socket_in(module_netns, netfilter_socket))
    reader = TableReader(lambda: socket_in(module_netns, netfilter_socket))
    sets = NftSets(ProcessRunner(module_netns), writer, reader, {4: "calico"})
    members: set[str] = set()
    sets.replace(IPSet("nets", IPSetType.NET, frozenset()))
    try:
        for added, removed in changes:
            sets.update_members("nets", added, removed)
            members = (members - removed) | added
            trio.run(sets.apply_updates)
            assert sets.held_back() == {}
            # Read back through netlink as the kernel holds it.
            name = sets.kernel_name("nets", 4)
            held = held_items(IPSetType.NET, reader.elements(2, "calico", name))
            assert held == elements_of(IPSetType.NET, 4, members)
    finally:
        trio.run(sets.cleanup_all)
