"""PendingIPSets: IP set changes that arrive before the programmer exists.

The programmer is built at the first apply (it needs I/O to detect the
kernel's features), but the managers hand sets over just before it. Until
then changes queue here, in order, and are replayed into it once.
"""

from __future__ import annotations

from dataplane.linux.writers.shapes import SetProgrammer
from dataplane.model import IPSet

__all__ = ["PendingIPSets"]


class PendingIPSets:
    def __init__(self) -> None:
        self._queue: list[IPSet | tuple[str, frozenset[str], frozenset[str]] | str] = []

    def replace(self, ipset: IPSet, programmer: SetProgrammer | None) -> None:
        if programmer is None:
            self._queue.append(ipset)
        else:
            programmer.replace(ipset)

    def update(
        self,
        set_id: str,
        added: frozenset[str],
        removed: frozenset[str],
        programmer: SetProgrammer | None,
    ) -> None:
        if programmer is None:
            self._queue.append((set_id, added, removed))
        else:
            programmer.update_members(set_id, added, removed)

    def remove(self, set_id: str, programmer: SetProgrammer | None) -> None:
        if programmer is None:
            self._queue.append(set_id)
        else:
            programmer.remove(set_id)

    def replay_into(self, programmer: SetProgrammer) -> None:
        for change in self._queue:
            if isinstance(change, IPSet):
                programmer.replace(change)
            elif isinstance(change, tuple):
                programmer.update_members(*change)
            else:
                programmer.remove(change)
        self._queue = []
