"""Element changes handed from the trio loop to the writer: on the loop, in a
worker thread, or -- a whole write into a table nothing relies on yet --
as several transactions, two in flight.

:func:`send`: a small change is written on the loop (a thread hop costs
more than it); a large one, or an iterator (a whole write made as it is
encoded), in a worker.

:func:`send_in_pieces`: one transaction is all or nothing, and that is
what a table in use needs: a resync's sets flushed and filled again must
never be seen half full. But its price is that nothing overlaps: the
writer makes and encodes every element (Python, holding the
interpreter), and only then does the kernel commit them all (in the
``send``, the interpreter free): at 10,000 services of 10 endpoints,
330,000 elements, about 0.4 s of each.

A table just made holds nothing any packet was using. Its elements may
land in pieces from two worker threads, so the kernel commits one piece
while the next is made and encoded; a write that opens with flushes
sends its first piece (holding them) alone, before any other. Every piece is adds of
elements no other piece holds, so their order does not matter; the
kernel takes one transaction at a time. A reader between two commits sees
some services and not others yet, as it would have seen none before.
Measured at 10,000 x 10 on a fresh table, the first apply (structure
and elements): 0.56-0.61 s against 0.92-0.93 s in one transaction, with
pieces of about 20,000 elements (80,000: 0.66 s; 160,000: 0.81 s).

A piece refused leaves the ones before it in place; the caller writes
every element again, in one transaction, into the table that now exists.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence

import trio

from dataplane.linux.nftables.elements import ElementChange, ElementSink

__all__ = ["PIECE", "send", "send_in_pieces"]

# A write this small runs on the loop: a thread hop costs more than it.
_INLINE_ELEMENTS = 2_000
# Elements per transaction: the kernel's commit of one piece and the
# making of the next then take about as long as each other.
PIECE = 20_000


async def send(writer: ElementSink, changes: Iterable[ElementChange]) -> None:
    """``writer(changes)`` for the trio loop: a large transaction (a full
    load encodes ~100,000 elements; an iterator, a whole write made as it
    goes) is encoded and sent from a worker."""
    if not isinstance(changes, Sequence) or (
        sum(len(c.elements) for c in changes) > _INLINE_ELEMENTS
    ):
        await trio.to_thread.run_sync(writer, changes)
    else:
        writer(changes)


async def send_in_pieces(
    writer: ElementSink,
    changes: Iterator[ElementChange],
    *,
    elements: int = PIECE,
    flushes: bool = True,
) -> int:
    """``changes`` as transactions of about ``elements`` elements each (a
    change is never split), two at a time; with ``flushes`` (``changes``
    may open with them) the first alone, before any other. Returns how
    many were sent.

    Raises:
        OSError: the first piece the kernel refused (no later piece is
            begun; those sent before it stay).
    """
    lock = threading.Lock()
    failed: list[OSError] = []
    sent = 0

    def take() -> list[ElementChange]:
        """The next piece (the iterator makes elements as it is read:
        one thread at a time)."""
        with lock:
            if failed:
                return []
            piece: list[ElementChange] = []
            count = 0
            for change in changes:
                piece.append(change)
                count += len(change.elements)
                if count >= elements:
                    break
            return piece

    def one() -> bool:
        nonlocal sent
        piece = take()
        if not piece:
            return False
        try:
            writer(piece)
        except OSError as exc:
            with lock:
                failed.append(exc)
            return False
        with lock:
            sent += 1
        return True

    async def worker() -> None:
        while await trio.to_thread.run_sync(one):
            pass

    # The first piece holds the flushes: committed before any other piece.
    # Without them, its commit overlaps the second's making as the rest do
    # (at 10,000 x 10, a piece of 20,000 elements is ~40 ms of commit).
    if not flushes or await trio.to_thread.run_sync(one):
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(worker)
    if failed:
        raise failed[0]
    return sent
