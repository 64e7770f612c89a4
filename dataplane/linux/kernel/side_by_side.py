"""side_by_side: independent kernel work at once, failing as a sequence would.

The first apply and every dual-stack change run tools and transactions
that touch nothing of each other's (IPv4's table and IPv6's, one save per
iptables backend and version); one after the other, each waits on the
last's process start and the kernel's commit. Side by side, the first
failure in the order given is raised once all are done -- a plain error,
as the same calls in sequence would raise, and not the ExceptionGroup a
nursery raises, which the callers' ``except ProgrammingError`` would not
catch.

Not for two ``nft`` writes into one namespace: the second finds the
ruleset changed under it at its commit and starts over (slower than in
turn, measured: ``programmers.py``). Reads, and iptables' tools, are fine.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

__all__ = ["side_by_side"]


async def side_by_side(*calls: Callable[[], Awaitable[object]]) -> None:
    """Run every call at once. None is cut short by another's failure
    (each writes something of its own, which must not be left half
    done); then the first failure in the order given is raised."""
    failed: dict[int, Exception] = {}

    async def one(index: int, call: Callable[[], Awaitable[object]]) -> None:
        try:
            await call()
        except Exception as exc:  # raised below, once the others are done
            failed[index] = exc

    async with trio.open_nursery() as nursery:
        for index, call in enumerate(calls):
            nursery.start_soon(one, index, call)
    if failed:
        raise failed[min(failed)]
