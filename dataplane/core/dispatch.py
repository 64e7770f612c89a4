"""Phase 1's routing: which managers each payload reaches.

Each payload type's managers are worked out once and kept (a manager that
declares ``handles`` sees only those types; one that does not sees every
message, as in Felix). What no manager handles is said once per kind, and
a field of Felix's the driver does not act on once per field: Felix sends
some kinds by the thousand.
"""

from __future__ import annotations

import logging

from google.protobuf.message import Message

from dataplane.core.observer import LoopObserver
from dataplane.managers import Manager
from dataplane.wire.refused_fields import RefusedFields

__all__ = ["Dispatch"]

log = logging.getLogger(__name__)

# The loop acts on these itself: no manager needed, nothing to say.
_LOOP_KINDS = frozenset({"config_update", "in_sync"})


class Dispatch:
    """Hands each payload to its managers, in registration order."""

    def __init__(self, managers: list[Manager], observer: LoopObserver) -> None:
        self.managers = managers
        self._observer = observer
        self._routes: dict[type, tuple[Manager, ...]] = {}
        self._said_ignored: set[str] = set()
        self._refused_fields = RefusedFields()
        self._said_refused: set[str] = set()

    def add(self, manager: Manager) -> None:
        self.managers.append(manager)
        self._routes.clear()

    def managers_for(self, payload_type: type) -> tuple[Manager, ...]:
        """The managers a payload of ``payload_type`` reaches, in order."""
        routed = tuple(
            m for m in self.managers if payload_type in getattr(m, "handles", (payload_type,))
        )
        self._routes[payload_type] = routed
        return routed

    def deliver(self, seq: int, kind: str, payload: Message) -> None:
        """``payload`` (message ``seq``, of ``kind``) to each of its managers.

        Raises:
            InputError: a manager refused it (those before may have taken it:
                each manager's own state stays consistent either way).
        """
        managers = self._routes.get(type(payload))
        if managers is None:
            managers = self.managers_for(type(payload))
        if not managers and kind not in self._said_ignored:
            self._said_ignored.add(kind)
            if kind not in _LOOP_KINDS:
                log.info(
                    "seq=%d %s ignored: no manager handles it (logged once per kind)", seq, kind
                )
        for manager in managers:
            manager.on_update(payload)
        if kind in self._refused_fields.kinds:
            for path, why in self._refused_fields.carried(kind, payload):
                self._refuse_field(seq, path, why)

    def _refuse_field(self, seq: int, path: str, why: str) -> None:
        if path in self._said_refused:
            return
        self._said_refused.add(path)  # once: thousands of endpoints may carry it
        log.warning(
            "seq=%d %s refused: %s (logged once; messages carrying it are programmed without it)",
            seq,
            path,
            why,
        )
        self._observer.refused_field(path, why)
