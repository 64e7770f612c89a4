"""StatusBook: every endpoint's status, and which changed since a reader last looked.

A platform that keeps its statuses as things change (the Linux one) hands
the status reporter this book instead of a fresh mapping each apply: the
reporter then compares only the endpoints written since its last look, so
a new pod's status costs one endpoint, not every endpoint on the node.

Each write that changes a status appends the key to a journal; a reader
keeps its position and asks what was written after it. The journal is
dropped once it outgrows the book (twice the endpoints, at least
``_MIN_JOURNAL``): a reader from before that is told to look at
everything (None), which is always right, only slower.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from dataplane.core.platform import EndpointKey
from dataplane.model import EndpointStatus

__all__ = ["StatusBook"]

_MIN_JOURNAL = 1024


class StatusBook(Mapping[EndpointKey, EndpointStatus]):
    def __init__(self) -> None:
        self._now: dict[EndpointKey, EndpointStatus] = {}
        self._journal: list[EndpointKey] = []
        self._start = 0  # the position of the journal's first entry

    def __getitem__(self, key: EndpointKey) -> EndpointStatus:
        return self._now[key]

    def __iter__(self) -> Iterator[EndpointKey]:
        return iter(self._now)

    def __len__(self) -> int:
        return len(self._now)

    def set(self, key: EndpointKey, status: EndpointStatus) -> None:
        if self._now.get(key) is not status:
            self._now[key] = status
            self._write(key)

    def remove(self, key: EndpointKey) -> None:
        if self._now.pop(key, None) is not None:
            self._write(key)

    def _write(self, key: EndpointKey) -> None:
        journal = self._journal
        if len(journal) >= max(_MIN_JOURNAL, 2 * len(self._now)):
            self._start += len(journal)
            journal.clear()
        journal.append(key)

    @property
    def position(self) -> int:
        """Where a reader that has seen everything so far stands."""
        return self._start + len(self._journal)

    def changed_since(self, position: int) -> list[EndpointKey] | None:
        """The endpoints written since ``position``, each once, in order;
        None when that part of the journal is gone (look at everything)."""
        if position < self._start:
            return None
        return list(dict.fromkeys(self._journal[position - self._start :]))
