"""The seam every HNS call goes through: blocking HCN calls, run off the event loop.

The Windows platform makes each HCN call through one ``call(fn, *args)``
(:class:`CallHcn`), which meters it and hands it to an :class:`Offload`: a
trio worker thread in the driver (:func:`in_thread`), the loop's own thread
in tests, so a settled loop has finished every call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import trio

__all__ = ["CallHcn", "Offload", "in_thread"]

T = TypeVar("T")

# Runs one blocking HCN call off the event loop: call(fn, *args).
CallHcn = Callable[..., Awaitable[Any]]


class Offload(Protocol):
    """How a blocking HCN call runs without blocking the loop (a worker thread)."""

    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]: ...


async def in_thread(fn: Callable[[], T]) -> T:
    """The real offload: a trio worker thread."""
    return await trio.to_thread.run_sync(fn)
