"""IPSetsManager: desired membership of every IP set Felix has made active.

It keeps the full membership of each set (needed to validate deltas against
the set's type and to answer a full rewrite) and, per apply, hands the
platform the smallest description of what changed: a delta when only
members moved, a full replacement when the set was (re)created.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from google.protobuf.message import Message

from dataplane.core.platform import IPSetsSink
from dataplane.errors import InputError
from dataplane.managers import scalars
from dataplane.managers.index import PolicyIndex
from dataplane.model import IPSet, IPSetType
from dataplane.wire._pb import felixbackend_pb2 as pb

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Set:
    type: IPSetType
    members: set[str]


@dataclass(slots=True)
class _Pending:
    """What to tell the platform about one set at the next apply."""

    replace: bool = False  # send the full set (supersedes the delta)
    removed: bool = False  # the set is gone
    added_members: set[str] = field(default_factory=set)
    removed_members: set[str] = field(default_factory=set)


class IPSetsManager:
    def __init__(self, sink: IPSetsSink, index: PolicyIndex) -> None:
        self._sink = sink
        self._index = index
        self._sets: dict[str, _Set] = {}
        self._pending: dict[str, _Pending] = {}
        self._sent_types: dict[str, IPSetType] = {}  # what the platform holds

    def __len__(self) -> int:
        return len(self._sets)

    def on_update(self, msg: Message) -> None:
        handler = self._handlers.get(type(msg))
        if handler is not None:
            handler(self, msg)

    def _on_update(self, msg: pb.IPSetUpdate) -> None:
        set_id = scalars.non_empty(msg.id, "id")
        kind = scalars.ipset_type(msg.type)
        members = scalars.ipset_members(kind, msg.members, "members")
        self._sets[set_id] = _Set(kind, members)
        self._pending[set_id] = _Pending(replace=True)

    def _on_remove(self, msg: pb.IPSetRemove) -> None:
        if self._sets.pop(msg.id, None) is None:
            log.debug("IPSetRemove for unknown set %s ignored", msg.id)
            return
        self._pending[msg.id] = _Pending(removed=True)

    def _on_delta(self, msg: pb.IPSetDeltaUpdate) -> None:
        current = self._sets.get(msg.id)
        if current is None:
            raise InputError("id", msg.id, "delta for an IP set that is not active")
        # Validate both lists before touching anything.
        added = scalars.ipset_members(current.type, msg.added_members, "added_members")
        removed = scalars.ipset_members(current.type, msg.removed_members, "removed_members")
        pending = self._pending.get(msg.id)
        if pending is None:
            pending = self._pending[msg.id] = _Pending()
        # Removals first, then additions (a member in both ends up present);
        # the pending delta composes the same way. A pending full replace
        # already carries the final membership.
        if removed:
            current.members -= removed
            if not pending.replace:
                pending.removed_members |= removed
                pending.added_members -= removed
        if added:
            current.members |= added
            if not pending.replace:
                pending.added_members |= added
                pending.removed_members -= added

    # Dispatch on the exact payload type: one dict lookup per message, which
    # matters because every manager sees every message.
    _handlers: ClassVar[dict[type, Callable[[IPSetsManager, Any], None]]] = {
        pb.IPSetUpdate: _on_update,
        pb.IPSetDeltaUpdate: _on_delta,
        pb.IPSetRemove: _on_remove,
    }
    handles: ClassVar[frozenset[type]] = frozenset(_handlers)

    def complete_deferred_work(self) -> None:
        for set_id, pending in self._pending.items():
            if pending.removed:
                self._sink.remove_ipset(set_id)
                self._shape_changed(set_id, None)
            elif pending.replace:
                current = self._sets[set_id]
                self._sink.replace_ipset(IPSet(set_id, current.type, frozenset(current.members)))
                self._shape_changed(set_id, current.type)
            elif pending.added_members or pending.removed_members:
                self._sink.update_ipset_members(
                    set_id, frozenset(pending.added_members), frozenset(pending.removed_members)
                )
        self._pending.clear()

    def _shape_changed(self, set_id: str, kind: IPSetType | None) -> None:
        # Created, removed or retyped: the rules that reference the set
        # render differently (an absent set matches nothing; a set's type
        # picks its kernel name), so the policy manager -- which completes
        # after this one -- rewrites them.
        if self._sent_types.get(set_id) == kind:
            return
        if kind is None:
            del self._sent_types[set_id]
        else:
            self._sent_types[set_id] = kind
        self._index.ip_set_changed_shape(set_id)
