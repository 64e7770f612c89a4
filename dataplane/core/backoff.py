"""Retry delays for failed applies, and the record of the failures in a row."""

from __future__ import annotations

import logging
from dataclasses import dataclass

__all__ = ["ApplyRetries", "Backoff"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff: ``initial`` doubling up to ``maximum`` seconds.

    No jitter: one driver per node retries against its own kernel, so there
    is no herd to spread out, and deterministic delays keep tests exact.
    """

    initial: float = 0.05
    maximum: float = 60.0
    factor: float = 2.0

    def delay(self, failures: int) -> float:
        """Delay before the retry that follows ``failures`` consecutive failures."""
        if failures < 1:
            return 0.0
        # Cap the exponent so huge failure counts cannot overflow a float.
        return min(self.maximum, self.initial * self.factor ** min(failures - 1, 64))


class ApplyRetries:
    """Consecutive failed applies: how many, the last error, when to try again.

    The loop records each apply's outcome here, and the operator reads it
    in the log; ``retry_at`` is None while the last apply succeeded.
    """

    __slots__ = ("backoff", "failures", "last_error", "retry_at")

    def __init__(self, backoff: Backoff) -> None:
        self.backoff = backoff
        self.failures = 0
        self.last_error: str | None = None
        self.retry_at: float | None = None

    def failed(self, error: str, now: float) -> float:
        """Record a failure at ``now``; returns the delay before the retry."""
        self.failures += 1
        self.last_error = error
        delay = self.backoff.delay(self.failures)
        self.retry_at = now + delay
        log.warning(
            "apply failed (attempt %d), pending state kept, retry in %.3fs: %s",
            self.failures,
            delay,
            error,
        )
        return delay

    def succeeded(self) -> int:
        """Record a success; returns how many failures it ended."""
        ended, self.failures = self.failures, 0
        self.last_error = None
        self.retry_at = None
        if ended:
            log.info("apply succeeded after %d failed attempt(s)", ended)
        return ended
