"""HeapFreezer: after an apply, what survives a collection is frozen, at most once per interval."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
import trio

from dataplane.core.heap import HeapFreezer
from tests.conftest import run_trio


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    try:
        yield
    finally:
        gc.unfreeze()  # the rest of the test session collects as before


class Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.mark.usefixtures("unfrozen")
def test_freezes_after_the_first_apply_then_once_per_interval() -> None:
    now = [100.0]
    heap = HeapFreezer(lambda: now[0], every=60.0)
    garbage = Cycle()
    gone = weakref.ref(garbage)
    del garbage  # cyclic garbage: collected, not frozen
    kept = [object() for _ in range(1000)]
    heap.after_apply()
    frozen = gc.get_freeze_count()
    assert frozen >= len(kept) and heap.freezes == 1
    assert gone() is None
    # Within the interval: nothing more is frozen.
    more = [[i] for i in range(1000)]
    now[0] += 59.0
    heap.after_apply()
    assert gc.get_freeze_count() == frozen and heap.freezes == 1
    # After it: what was made since is frozen too.
    now[0] += 1.0
    heap.after_apply()
    assert gc.get_freeze_count() >= frozen + len(more) and heap.freezes == 2


@pytest.mark.usefixtures("unfrozen")
def test_start_up_holds_automatic_collection_until_the_first_apply() -> None:
    async def main() -> None:
        heap = HeapFreezer(trio.current_time)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(heap.hold, 120.0)
            await trio.sleep(1.0)
            assert not gc.isenabled()
            heap.after_apply()  # collects, freezes, and collects automatically again
            assert gc.isenabled() and heap.freezes == 1
            nursery.cancel_scope.cancel()
        assert gc.isenabled()

    run_trio(main)


@pytest.mark.usefixtures("unfrozen")
def test_a_start_up_without_an_apply_collects_again_after_the_limit() -> None:
    async def main() -> None:
        heap = HeapFreezer(trio.current_time)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(heap.hold, 120.0)
            await trio.sleep(119.0)
            assert not gc.isenabled()  # a source still not answering: held
            await trio.sleep(2.0)
            assert gc.isenabled() and heap.freezes == 0
        # Once past start-up (a freeze done), holding again is refused.
        heap.after_apply()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(heap.hold, 120.0)
            await trio.sleep(1.0)
            assert gc.isenabled()
            nursery.cancel_scope.cancel()

    run_trio(main)
