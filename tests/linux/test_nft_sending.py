"""A whole write into a table nothing uses yet, in pieces: every change once, the
flushes first, two pieces in flight, a refusal stopping the rest; and the
services table using pieces only where it found no table (``sending.py``)."""

from __future__ import annotations

import dataclasses
import errno
import threading
from collections.abc import Iterable

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.errors import ProgrammingError
from dataplane.linux.nftables.elements import NFPROTO_IPV4, ElementChange
from dataplane.linux.nftables.sending import send_in_pieces
from dataplane.linux.nftables.service_table import ServiceTable
from dataplane.model.services import Service, ServiceKey
from tests.linux.test_service_layout import LAYOUT, FakeSets, Nft, b, svc, wanted


def _changes(sizes: list[int], flushes: int) -> list[ElementChange]:
    """``flushes`` flushes, then one add of each size (elements numbered apart)."""
    out = [ElementChange("flush", NFPROTO_IPV4, "t", f"s{i}", ()) for i in range(flushes)]
    at = 0
    for i, size in enumerate(sizes):
        elements = tuple(n.to_bytes(4, "big") for n in range(at, at + size))
        out.append(ElementChange("add", NFPROTO_IPV4, "t", f"s{i % 3}", elements))
        at += size
    return out


class _Recorder:
    """A sink noting each transaction, and what else was in flight as it began."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pieces: list[list[ElementChange]] = []
        self.in_flight = 0
        self.alongside: list[int] = []  # per transaction, how many ran beside it as it began

    def __call__(self, changes: Iterable[ElementChange]) -> None:
        with self.lock:
            self.alongside.append(self.in_flight)
            self.in_flight += 1
            self.pieces.append(list(changes))
        with self.lock:
            self.in_flight -= 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=30), st.integers(0, 4), st.integers(1, 50))
def test_every_change_goes_once_in_pieces_the_first_alone(
    sizes: list[int], flushes: int, elements: int
) -> None:
    changes = _changes(sizes, flushes)
    sink = _Recorder()
    sent = trio.run(lambda: send_in_pieces(sink, iter(changes), elements=elements, flushes=True))
    assert sent == len(sink.pieces) and all(sink.pieces)
    # Each piece is cut at the first change that takes it to the size.
    for piece in sink.pieces:
        counts = [len(c.elements) for c in piece]
        assert sum(counts[:-1]) < elements
    # Every change exactly once; the flushes in the first piece, which
    # nothing ran beside.
    assert sorted(map(repr, (c for p in sink.pieces for c in p))) == sorted(map(repr, changes))
    if changes:
        assert sink.pieces[0][:flushes] == changes[:flushes]
        assert sink.alongside[0] == 0


class _HeldInKernel:
    """A sink holding piece ``held`` in the kernel until the next piece
    begins (at most 10 s), noting whether it did."""

    def __init__(self, held: int) -> None:
        self.held = held
        self.next_began = threading.Event()
        self.overlapped: list[bool] = []
        self._lock = threading.Lock()
        self._calls = 0

    def __call__(self, changes: Iterable[ElementChange]) -> None:
        with self._lock:
            n, self._calls = self._calls, self._calls + 1
        if n == self.held:
            self.overlapped.append(self.next_began.wait(timeout=10))
        elif n == self.held + 1:
            self.next_began.set()


def test_the_kernel_commits_one_piece_while_the_next_is_made() -> None:
    """The second piece held in the kernel: a third begins meanwhile."""
    sink = _HeldInKernel(1)
    sent = trio.run(lambda: send_in_pieces(sink, iter(_changes([5] * 6, 1)), elements=5))
    assert sent == 6 and sink.overlapped == [True]


def test_without_flushes_the_first_piece_is_not_alone() -> None:
    """The first piece held in the kernel: with no flush to come first, a
    second piece begins meanwhile (with flushes it would wait its turn)."""
    sink = _HeldInKernel(0)
    pieces = iter(_changes([5] * 4, 0))
    sent = trio.run(lambda: send_in_pieces(sink, pieces, elements=5, flushes=False))
    assert sent == 4 and sink.overlapped == [True]


def test_a_refused_piece_is_raised_and_no_later_piece_begins() -> None:
    calls: list[int] = []
    lock = threading.Lock()

    def sink(changes: Iterable[ElementChange]) -> None:
        with lock:
            calls.append(len(calls))
            if calls[-1] == 2:
                raise OSError(errno.ENOSPC, "set full")

    with pytest.raises(OSError, match="set full"):
        trio.run(lambda: send_in_pieces(sink, iter(_changes([5] * 40, 1)), elements=5))
    # The other worker may finish the piece it had; none is begun after.
    assert len(calls) <= 4


def _services(n: int) -> list[Service]:
    return [
        dataclasses.replace(
            svc(*(b(f"10.65.{i}.{j}") for j in range(1, 4)), cluster_ips=(f"10.96.1.{i}",)),
            key=ServiceKey("prod", f"s{i}"),
        )
        for i in range(n)
    ]


SERVICES = _services(8)
WANT = {n: e for n, e in wanted({s.key.name: s for s in SERVICES}, LAYOUT).items() if e}


def _table(kernel: FakeSets | None = None) -> tuple[ServiceTable, FakeSets]:
    """A table given :data:`SERVICES`, nothing applied yet, in pieces of
    about 4 elements (a change is never split), and its kernel (a fresh
    one unless given: a restart onto it)."""
    kernel = kernel or FakeSets()
    table = ServiceTable(LAYOUT, Nft(), kernel, kernel)
    table.piece = 4
    for service in SERVICES:
        table.set_service(service)
    return table, kernel


def test_into_no_table_the_first_write_lands_in_pieces_into_sets_in_use_in_one() -> None:
    table, kernel = _table()
    trio.run(table.apply)
    assert kernel.contents() == WANT
    assert kernel.transactions > 1
    # A restart onto those sets, its rules not as this one writes them (a
    # fresh Nft holds no script): every element again, at once.
    again, _ = _table(kernel)
    before = kernel.transactions
    trio.run(again.apply)
    assert kernel.transactions == before + 1 and kernel.contents() == WANT


class _Flushes:
    """The kernel-like fake, noting the sets each transaction flushed."""

    def __init__(self, kernel: FakeSets) -> None:
        self.kernel = kernel
        self.flushed: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, changes: Iterable[ElementChange]) -> None:
        seen = list(changes)
        with self.lock:
            self.flushed += [c.set for c in seen if c.op == "flush"]
        self.kernel(seen)


def test_into_no_table_nothing_is_flushed_into_sets_in_use_every_set_is() -> None:
    # The structure's nft run has just made every set, empty: flushing
    # them all was the kernel's 11-15 ms of every start.
    table, kernel = _table()
    table._writer = first = _Flushes(kernel)
    trio.run(table.apply)
    assert kernel.contents() == WANT
    assert first.flushed == []
    # A restart onto those sets: each flushed (with what it held) and
    # filled again, in the one transaction.
    again, _ = _table(kernel)
    kernel.sets["fe"][b"stale"] = b"stale"  # (kept by nothing else)
    again._writer = restart = _Flushes(kernel)
    trio.run(again.apply)
    assert sorted(restart.flushed) == sorted(again.set_names())
    assert kernel.contents() == WANT


def test_a_piece_refused_is_repaired_by_one_whole_transaction() -> None:
    table, kernel = _table()
    table._writer = refusing = _RefuseThird(kernel)
    with pytest.raises(ProgrammingError, match="refused"):
        trio.run(table.apply)
    assert len(kernel.contents()) > 0 and refusing.calls >= 3  # some pieces stayed
    before = kernel.transactions
    trio.run(table.apply)
    assert kernel.contents() == WANT and kernel.transactions == before + 1


class _RefuseThird:
    """The kernel-like fake, refusing its third transaction."""

    def __init__(self, kernel: FakeSets) -> None:
        self.kernel = kernel
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, changes: Iterable[ElementChange]) -> None:
        with self.lock:
            self.calls += 1
            third = self.calls == 3
        if third:
            raise OSError(errno.ENOMEM, "refused")
        self.kernel(changes)
