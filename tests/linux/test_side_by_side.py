"""side_by_side: the calls run at once, and fail as the same calls in sequence would."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.side_by_side import side_by_side


def test_the_calls_run_at_once() -> None:
    # Each waits for the other to have begun: one after the other, the
    # first would wait for ever (the deadline, on a clock that jumps).
    began = [trio.Event(), trio.Event()]

    async def both(mine: int) -> None:
        began[mine].set()
        await began[1 - mine].wait()

    async def main() -> None:
        with trio.fail_after(10):
            await side_by_side(lambda: both(0), lambda: both(1))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_first_failure_in_order_is_raised_plain_once_all_are_done() -> None:
    done: list[str] = []

    async def fails(name: str, after: trio.Event | None) -> None:
        if after is not None:
            await after.wait()
        raise ProgrammingError(f"{name} refused")

    async def main() -> None:
        second_failed = trio.Event()

        async def second() -> None:
            try:
                await fails("second", None)
            finally:
                second_failed.set()

        async def slow() -> None:
            await second_failed.wait()
            done.append("slow")

        # The first fails after the second: still the one raised, a
        # ProgrammingError (no exception group), with the slow one done.
        await side_by_side(lambda: fails("first", second_failed), second, slow)

    with pytest.raises(ProgrammingError, match="first refused"):
        trio.run(main)
    assert done == ["slow"]
