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
    """Which managers each payload type reaches, in registration order.

    The loop looks a payload's managers up in :attr:`routes` itself (once
    per message: phase 1's hot path) and asks :meth:`route` only for a
    type it has not seen.
    """

    def __init__(self, managers: list[Manager], observer: LoopObserver) -> None:
        self.managers = managers
        self._observer = observer
        self.routes: dict[type, tuple[Manager, ...]] = {}
        self._said_ignored: set[str] = set()
        self._refused_fields = RefusedFields()
        # Most kinds carry no field to refuse: one set lookup per message.
        self.refused_kinds = self._refused_fields.kinds
        self._said_refused: set[str] = set()

    def add(self, manager: Manager) -> None:
        self.managers.append(manager)
        self.routes.clear()

    def managers_for(self, payload_type: type) -> tuple[Manager, ...]:
        """The managers a payload of ``payload_type`` reaches, in order."""
        return tuple(
            m for m in self.managers if payload_type in getattr(m, "handles", (payload_type,))
        )

    def route(self, seq: int, kind: str, payload_type: type) -> tuple[Manager, ...]:
        """The managers of a type not routed yet (kept in :attr:`routes`);
        a kind no manager handles is said once."""
        managers = self.routes[payload_type] = self.managers_for(payload_type)
        if not managers and kind not in self._said_ignored:
            self._said_ignored.add(kind)
            if kind not in _LOOP_KINDS:
                log.info(
                    "seq=%d %s ignored: no manager handles it (logged once per kind)", seq, kind
                )
        return managers

    def refuse_fields(self, seq: int, kind: str, payload: Message) -> None:
        """Say once per field what ``payload`` carries that the driver does not act on."""
        for path, why in self._refused_fields.carried(kind, payload):
            if path in self._said_refused:
                continue
            self._said_refused.add(path)  # once: thousands of endpoints may carry it
            log.warning(
                "seq=%d %s refused: %s (logged once; messages carrying it are programmed"
                " without it)",
                seq,
                path,
                why,
            )
            self._observer.refused_field(path, why)
