"""HeapFreezer: after an apply, what survives a collection is frozen, at most once per interval."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from dataplane.core.heap import HeapFreezer


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
