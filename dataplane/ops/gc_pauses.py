"""``dataplane_gc_pause_seconds``: how long each garbage collection held the process.

Go exporters have ``go_gc_duration_seconds``; Python's own metrics count
collections (``python_gc_collections_total``) but not their length, and a
collection runs in whichever thread allocates, the loop's included: a
full pass over a large heap is a pause every change waiting behind it
pays (:mod:`dataplane.core.heap` keeps them short, this says whether it
does). Timed by :data:`gc.callbacks`, installed once per process however
many registries show it.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import Histogram
from prometheus_client.metrics_core import Metric

__all__ = ["GcPauses"]

# 0.1 ms (a young collection) to 1 s (a full pass over a large heap).
BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)

_PAUSES = Histogram(
    "dataplane_gc_pause_seconds",
    "Time each garbage collection took, by generation (2: a full collection), in"
    " whichever thread ran it.",
    ["generation"],
    buckets=BUCKETS,
    registry=None,
)
_started = 0.0
_installed = False


def _callback(phase: str, info: dict[str, Any]) -> None:
    # One collection at a time per process (the GIL is held throughout),
    # so one start time serves every thread.
    global _started  # noqa: PLW0603 - the one collection in progress
    if phase == "start":
        _started = time.perf_counter()
    else:
        _PAUSES.labels(str(info["generation"])).observe(time.perf_counter() - _started)


class GcPauses:
    """A collector of the process's collection pauses, for one registry."""

    def __init__(self) -> None:
        global _installed  # noqa: PLW0603 - once per process
        if not _installed:
            gc.callbacks.append(_callback)
            _installed = True

    def collect(self) -> Iterable[Metric]:
        return _PAUSES.collect()
