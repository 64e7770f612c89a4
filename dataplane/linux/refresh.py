"""RefreshTimers: when each programmer re-reads the kernel to repair drift.

``IptablesRefreshInterval``, ``IpsetsRefreshInterval`` and
``RouteRefreshInterval`` (0 disables one). A timer fires at most once per
apply and is re-armed from the end of that apply, so a refresh that takes
long (re-reading a huge table) never finds itself due again at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dataplane.config import Config

__all__ = ["TIMERS", "RefreshTimers"]

TIMERS = ("iptables", "ipsets", "routes")


class RefreshTimers:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._next: dict[str, float] = {}

    @staticmethod
    def _intervals(config: Config) -> dict[str, float]:
        return {
            "iptables": config.iptables_refresh_interval,
            "ipsets": config.ipsets_refresh_interval,
            "routes": config.route_refresh_interval,
        }

    def start(self) -> None:
        """Every timer due now: the first apply adopts what the kernel holds."""
        now = self._clock()
        self._next = dict.fromkeys(TIMERS, now)

    def due(self) -> list[str]:
        now = self._clock()
        return [t for t in TIMERS if now >= self._next.get(t, math.inf)]

    def rearm(self, fired: list[str], config: Config) -> None:
        now = self._clock()
        intervals = self._intervals(config)
        for timer in fired:
            interval = intervals[timer]
            self._next[timer] = now + interval if interval > 0 else math.inf

    def next_due(self) -> float:
        return min(self._next.values(), default=math.inf)
