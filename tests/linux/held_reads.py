"""A runner (or a netlink table source) that holds a read back until a test lets it go.

For the refreshes that read the kernel beside the applies: a test starts a
refresh, waits until its read has been taken (``read``), writes something
the read cannot have seen, then lets the read's answer through (``hold``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import trio

from dataplane.linux.kernel.cmd import CommandResult, CommandRunner
from dataplane.linux.nftables.reader import ReadElement, ReadRule, TableSource


class HeldReads:
    """Passes commands through; once ``hold`` is set, the answers of reads
    (commands ``is_read`` says are) wait for it. ``reads`` counts them."""

    def __init__(self, runner: CommandRunner, is_read: Callable[[Sequence[str]], bool]) -> None:
        self._runner = runner
        self._is_read = is_read
        self.hold: trio.Event | None = None
        self.read = trio.Event()
        self.reads = 0

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        result = await self._runner.run(argv, stdin=stdin, check=check)
        if self._is_read(argv):
            self.reads += 1
            if self.hold is not None:
                self.read.set()
                await self.hold.wait()
        return result


class HeldSource:
    """A :class:`TableSource` whose listing of a table's sets takes every set's
    elements at once and, once ``hold`` is set, waits for it before answering
    (in the reading worker thread): what it answers was read before."""

    def __init__(self, source: TableSource) -> None:
        self._source = source
        self.hold: trio.Event | None = None
        self.read = trio.Event()
        self._taken: dict[tuple[int, str, str], list[ReadElement]] = {}

    def set_names(self, family: int, table: str) -> list[str]:
        names = self._source.set_names(family, table)
        self._taken = {
            (family, table, n): list(self._source.elements(family, table, n)) for n in names
        }
        if self.hold is not None:
            trio.from_thread.run_sync(self.read.set)
            trio.from_thread.run(self.hold.wait)
        return names

    def elements(self, family: int, table: str, set_name: str) -> list[ReadElement]:
        taken = self._taken.pop((family, table, set_name), None)
        return taken if taken is not None else list(self._source.elements(family, table, set_name))

    def rules(self, family: int, table: str) -> list[ReadRule]:
        return self._source.rules(family, table)


async def write_during_a_read(
    runner: HeldReads | HeldSource,
    refresh: Callable[[], Awaitable[object]],
    write: Callable[[], Awaitable[object]],
) -> None:
    """Run ``refresh``; once its read is taken, ``write``, and only then let
    the read's answer through: the read cannot have seen the write."""
    runner.hold, runner.read = trio.Event(), trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(refresh)
        await runner.read.wait()
        await write()
        runner.hold.set()
    runner.hold = None


async def refresh_during_a_write(
    runner: HeldReads,
    apply: Callable[[], Awaitable[object]],
    refresh: Callable[[], Awaitable[bool]],
) -> bool:
    """Run ``apply`` with ``runner`` holding its writes' answers (its
    ``is_read`` picks the writing command); meanwhile ``refresh``, whose
    answer this returns. The write has landed, the apply not yet seen it."""
    runner.hold, runner.read = trio.Event(), trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(apply)
        await runner.read.wait()
        found = await refresh()
        runner.hold.set()
    runner.hold = None
    return found
