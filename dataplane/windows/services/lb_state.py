"""The ids of the load balancers this driver created, kept in a small file.

An HNS load balancer has no name or tag, so nothing on the host says whose
it is; kube-proxy's, or an operator's, must never be touched. The driver
records the id of every load balancer it creates here *before* creating it
(it chooses the id), so a crash between the create and the record cannot
leave an untracked one behind; ids HNS turns out not to hold are dropped
at the next listing. The file is rewritten atomically: a reader sees the
old list or the new one.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["OwnedIds"]

log = logging.getLogger(__name__)


class OwnedIds:
    """A set of load-balancer ids, saved to ``path`` (None: kept in memory only)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._ids: set[str] = set()
        self._saved: frozenset[str] = frozenset()
        if path is not None and path.exists():
            try:
                data = json.loads(path.read_text())
                self._ids = {str(i).upper() for i in data["LoadBalancers"]}
            except (OSError, ValueError, KeyError, TypeError) as exc:
                # Without it no load balancer is ours: none is deleted or changed,
                # and a frontend one of them holds is reported as taken.
                log.error("%s unreadable (%s): treating no load balancer as ours", path, exc)
            self._saved = frozenset(self._ids)

    def __contains__(self, lb_id: object) -> bool:
        return isinstance(lb_id, str) and lb_id.upper() in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._ids))

    def add(self, ids: Iterable[str]) -> None:
        self._ids |= {i.upper() for i in ids}

    def discard(self, ids: Iterable[str]) -> None:
        self._ids -= {i.upper() for i in ids}

    def keep_only(self, ids: Iterable[str]) -> None:
        self._ids &= {i.upper() for i in ids}

    def save(self) -> None:
        """Write the ids if they changed since the last save."""
        if self.path is None or frozenset(self._ids) == self._saved:
            return
        text = json.dumps({"LoadBalancers": sorted(self._ids)}, indent=1) + "\n"
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        temp.write_text(text)
        os.replace(temp, self.path)
        self._saved = frozenset(self._ids)
