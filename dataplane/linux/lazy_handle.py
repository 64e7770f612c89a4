"""A netlink handle opened only when something is first asked of it.

Opening a pyroute2 handle costs about a millisecond. Most applies need
none: the tables we hold are cached and the writes go through the batch
writer's own socket, so the programmers open one only for a read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["OnFirstUse"]


class OnFirstUse:
    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._handle: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._handle is None:
            self._handle = self._make()
        return getattr(self._handle, name)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
