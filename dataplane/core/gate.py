"""When the node may be programmed, and what is shown until then.

The first apply writes a whole, consistent node: it waits for Felix's
InSync and for every other source of desired state (the Kubernetes API)
to have synced. Until then the kernel is not touched, but what was
received can be handed down to the platform as a *preview* (no apply), so
that ``show`` says what is pending rather than nothing: at most once per
PREVIEW_INTERVAL, never more than PREVIEW_SHARE of the loop's time, and
only while someone reads the state.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence

import trio

from dataplane.core.observer import LoopObserver
from dataplane.managers import Manager

__all__ = ["PREVIEW_INTERVAL", "PREVIEW_SHARE", "Gate", "Source"]

log = logging.getLogger(__name__)

# Before the node may be programmed, what was received is handed down for
# `show` at most this often: a start's burst of messages is not resolved
# once per batch.
PREVIEW_INTERVAL = 1.0
# ... and never more than this share of the loop's time: at 10,000 services
# from the API a preview takes a few hundred milliseconds, every one of
# them taken from the lists the first apply is waiting for.
PREVIEW_SHARE = 0.1

# (name, run beside the loop, synced?)
Source = tuple[str, Callable[[], Awaitable[None]], Callable[[], bool]]


class Gate:
    """Felix's InSync, the other sources' syncs, and the previews before them."""

    def __init__(self, observer: LoopObserver) -> None:
        self._observer = observer
        self.sources: list[Source] = []
        self.in_sync = False  # Felix's InSync has arrived
        # Changes not handed down since the last preview.
        self.unpreviewed = False
        self._preview_due = -math.inf
        self._said_waiting = False

    def may_program(self) -> bool:
        """Felix's InSync has come, and every other source has synced."""
        if not self.in_sync:
            return False
        waiting = self._waiting()
        if waiting and not self._said_waiting:
            self._said_waiting = True
            log.info("InSync received; programming once %s ha(s) synced", ", ".join(waiting))
        return not waiting

    def preview_at(self) -> float:
        """When a preview is due (inf: none is wanted)."""
        if self.unpreviewed and self._observer.wants_preview:
            return self._preview_due
        return math.inf

    def maybe_preview(self, managers: Sequence[Manager], *, final: bool = False) -> None:
        """Hand the managers' changes down to the platform (no apply: the
        kernel is not touched), if one is due and someone reads the state."""
        if not self.unpreviewed or not self._observer.wants_preview:
            return
        now = trio.current_time()
        if not final and now < self._preview_due:
            return
        for manager in managers:
            manager.complete_deferred_work()
        self.unpreviewed = False  # the loop's dirty flag stays: the first apply is owed
        cost = trio.current_time() - now
        self._preview_due = now + max(PREVIEW_INTERVAL, cost / PREVIEW_SHARE)
        self._observer.previewed(self.waiting_for())

    def waiting_for(self) -> str:
        """Why the node is not programmed yet, in one line."""
        if not self.in_sync:
            return "Felix's InSync has not arrived"
        return f"waiting for {', '.join(self._waiting())} to sync"

    def _waiting(self) -> list[str]:
        return [name for name, _run, synced in self.sources if not synced()]
