"""The services table read back: tampering found and repaired, changes during a read left alone.

The table keeps its services, not their elements: a read-back makes what
is wanted again from a snapshot of the services, compares each set by a
digest first, and element by element only where the digests differ.
Against the kernel-like fake of ``test_service_layout``.
"""

from __future__ import annotations

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.linux.nftables.elements import encoded, key_of
from dataplane.linux.nftables.service_layout import ServiceLayout
from dataplane.linux.nftables.service_table import ServiceTable
from dataplane.linux.nftables.service_wanted import digest, digests, whole_write
from dataplane.model.services import Service, ServiceKey, ServicePort
from tests.linux.test_service_layout import (
    LAYOUT,
    FakeSets,
    HeldRead,
    Nft,
    b,
    key,
    refresh_racing,
    services_drawn,
    svc,
    wanted,
)


def held(kernel: FakeSets) -> dict[str, set[bytes]]:
    return kernel.contents()


def expected(services: dict[str, Service], layout: ServiceLayout) -> dict[str, set[bytes]]:
    return {n: e for n, e in wanted(services, layout).items() if e}


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from([LAYOUT, ServiceLayout(6, "cali-svc", 0x4000000)]),
    st.lists(services_drawn, min_size=1, max_size=8),
    st.data(),
)
def test_a_refresh_finds_exactly_what_was_tampered_with_and_the_apply_repairs_it(
    layout: ServiceLayout, drawn: list[Service], data: st.DataObject
) -> None:
    nft = Nft()
    kernel = FakeSets(nft)
    table = ServiceTable(layout, nft, kernel, kernel)
    services: dict[str, Service] = {}
    for service in drawn:
        services[service.key.name] = service
        table.set_service(service)
    trio.run(table.apply)
    assert held(kernel) == expected(services, layout)
    assert not trio.run(table.refresh)  # what was written is what is wanted

    # Behind the table's back: elements deleted, strays added.
    everything = sorted((n, e) for n, els in kernel.sets.items() for e in els.values())
    gone = data.draw(
        st.lists(st.sampled_from(everything), unique=True) if everything else st.just([])
    )
    for name, element in gone:
        del kernel.sets[name][key_of(element)]
    # And strays: elements of a service this table does not have (a map
    # slot of one of ours with another backend, too).
    foreign = data.draw(services_drawn)
    theirs = sorted(  # (of the sets the table has: no other exists to add to)
        (n, e)
        for n, els in wanted({"x": foreign}, layout).items()
        for e in els
        if n in table.set_names()
    )
    strays = data.draw(
        st.lists(st.sampled_from(theirs), unique=True, max_size=4) if theirs else st.just([])
    )
    for name, element in strays:
        kernel.sets.setdefault(name, {})[key_of(element)] = element
    tampered = held(kernel) != expected(services, layout)

    assert trio.run(table.refresh) == tampered
    trio.run(table.apply)
    assert held(kernel) == expected(services, layout)
    assert not trio.run(table.refresh)


def test_an_element_noted_while_the_refresh_reads_is_not_marked_from_the_snapshot() -> None:
    """The snapshot wants an element the kernel lacks only because its add
    has not been written; the service goes before the read is compared.
    Marking it from the snapshot would write an element nothing wants."""
    nft = Nft()
    kernel = HeldRead(nft, "fe")
    table = ServiceTable(LAYOUT, nft, kernel, kernel)
    web = svc(b("10.65.1.1"))
    table.set_service(web)
    trio.run(table.apply)
    other = Service(
        ServiceKey("prod", "other"),
        cluster_ips=("10.96.0.20",),
        ports=(ServicePort("http", "tcp", 80),),
        backends=(b("10.65.1.9"),),
    )
    table.set_service(other)  # noted, not written: the kernel lacks it

    async def remove() -> None:
        table.remove_service(other.key)  # before any write

    refresh_racing(table, kernel, remove)
    trio.run(table.apply)
    assert held(kernel) == expected({"web": web}, LAYOUT)


def test_a_digest_is_the_set_s_whatever_the_order_or_the_pieces() -> None:
    elements = [encoded(key(f"10.96.0.{i}")) for i in range(1, 40)]
    assert digest(elements) == digest(reversed(elements))
    pieces = [("fe", tuple(elements[:10])), ("fe", tuple(elements[10:])), ("masq", ())]
    assert digests(pieces)["fe"] == digest(elements)
    assert digests(pieces)["masq"] == digest([]) == (0, 0)
    assert digest(elements[1:]) != digest(elements)
    assert digest([*elements[1:], encoded(key("10.96.1.1"))]) != digest(elements)


@settings(max_examples=50, deadline=None)
@given(st.lists(services_drawn, max_size=6), st.integers(1, 3))
def test_a_whole_write_flushes_every_set_then_adds_each_wanted_element_once_in_chunks(
    drawn: list[Service], chunk: int
) -> None:
    """What the first apply hands the writer, made as it is read."""
    table = ServiceTable(LAYOUT, Nft(), FakeSets(), FakeSets())
    services = {s.key.name: s for s in drawn}
    for service in services.values():
        table.set_service(service)
    names = table.set_names()
    changes = list(whole_write(LAYOUT, names, table._wanted(), chunk=chunk))
    flushes = [c for c in changes if c.op == "flush"]
    assert [c.set for c in flushes] == names and changes[: len(names)] == flushes
    added: dict[str, list[bytes]] = {}
    for change in changes[len(names) :]:
        assert change.op == "add" and 0 < len(change.elements) <= chunk
        added.setdefault(change.set, []).extend(change.elements)  # type: ignore[arg-type]
    assert {n: set(e) for n, e in added.items()} == expected(services, LAYOUT)
    assert all(len(e) == len(set(e)) for e in added.values())  # each once
