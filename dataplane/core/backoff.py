"""Retry delays for failed applies."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Backoff"]


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
