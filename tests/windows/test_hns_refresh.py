"""The refresh cycle: every endpoint re-read once per interval, in ticks, within a call rate."""

from __future__ import annotations

import logging
import math

import pytest

from dataplane.windows.view.hns_refresh import TICKS, RefreshCycle


def _cycle(
    cycle: RefreshCycle, ids: list[str], start: float = 0.0
) -> list[tuple[float, bool, tuple[str, ...]]]:
    """Ticks taken until every id was read once: (when, networks listed, reads)."""
    cycle.schedule(start, cycle.interval)
    taken: list[tuple[float, bool, tuple[str, ...]]] = []
    read = 0
    while read < len(ids) or not taken:
        now = cycle.next_tick
        assert cycle.due(now) and not cycle.due(now - 1e-6)
        tick = cycle.take(now, ids)
        taken.append((now, tick.networks, tick.reads))
        read += len(tick.reads)
        assert len(taken) < 10 * TICKS, "never done"
    return taken


def test_one_interval_reads_every_endpoint_once_in_ten_ticks() -> None:
    ids = [f"EP{i:03d}" for i in range(95)]
    taken = _cycle(RefreshCycle(interval=90.0, rate=0), ids)
    assert [t[0] for t in taken] == pytest.approx([9.0 * (i + 1) for i in range(TICKS)])
    assert [t[1] for t in taken] == [True] + [False] * (TICKS - 1)  # networks once a cycle
    reads = [r for t in taken for r in t[2]]
    assert reads == ids  # each once, in order
    assert max(len(t[2]) for t in taken) == math.ceil(95 / TICKS)


def test_the_next_cycle_starts_after_the_tenth_tick_even_with_nothing_to_read() -> None:
    cycle = RefreshCycle(interval=90.0)
    cycle.schedule(0.0, 90.0)
    starts = [cycle.take(cycle.next_tick, []).networks for _ in range(2 * TICKS)]
    assert starts == ([True] + [False] * (TICKS - 1)) * 2


def test_the_rate_bounds_a_tick_and_a_slow_cycle_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ids = [f"EP{i:04d}" for i in range(1000)]
    # 10 calls/s for a 9 s tick: 30 reads a tick, not the 100 the interval asks.
    with caplog.at_level(logging.WARNING, logger="dataplane.windows.view.hns_refresh"):
        taken = _cycle(RefreshCycle(interval=90.0, rate=10.0), ids)
    assert max(len(t[2]) for t in taken) == 30
    assert [r for t in taken for r in t[2]] == ids
    assert len(taken) == math.ceil(1000 / 30)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "1000 HNS endpoints at 10 calls/s takes 306 s" in line


def test_no_interval_no_refresh() -> None:
    cycle = RefreshCycle()
    cycle.schedule(5.0, 0.0)
    assert not cycle.due(1e12)
    cycle.schedule(5.0, 30.0)  # turned on: the next tick a tenth of it away
    assert cycle.next_tick == 8.0


def test_by_default_a_1000_endpoint_node_is_read_within_a_30_s_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The default rate covers the interval at 1,000 endpoints: what is
    removed behind the driver is back within two intervals, not ten."""
    ids = [f"EP{i:04d}" for i in range(1000)]
    with caplog.at_level(logging.WARNING, logger="dataplane.windows.view.hns_refresh"):
        taken = _cycle(RefreshCycle(interval=30.0), ids)
    assert len(taken) == TICKS
    assert taken[-1][0] == pytest.approx(30.0)
    assert [r for t in taken for r in t[2]] == ids
    assert not caplog.records
