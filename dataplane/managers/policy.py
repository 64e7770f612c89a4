"""PolicyManager: active policies and profiles, as model values.

It converts and validates; the shared :class:`PolicyIndex` records them,
and at each apply this manager hands the platform the policies and profiles
whose rules must be (re)written -- nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from google.protobuf.message import Message

from dataplane.core.platform import RulesSink
from dataplane.managers import convert, scalars
from dataplane.managers.index import PolicyIndex
from dataplane.wire._pb import felixbackend_pb2 as pb


class PolicyManager:
    def __init__(self, sink: RulesSink, index: PolicyIndex) -> None:
        self._sink = sink
        self._index = index

    def on_update(self, msg: Message) -> None:
        handler = self._handlers.get(type(msg))
        if handler is not None:
            handler(self, msg)

    def _on_policy_update(self, msg: pb.ActivePolicyUpdate) -> None:
        key = convert.policy_key(msg.id)
        self._index.set_policy(key, convert.policy(msg.policy))

    def _on_policy_remove(self, msg: pb.ActivePolicyRemove) -> None:
        self._index.set_policy(convert.policy_key(msg.id), None)

    def _on_profile_update(self, msg: pb.ActiveProfileUpdate) -> None:
        name = scalars.non_empty(msg.id.name, "id.name")
        self._index.set_profile(name, convert.profile(msg.profile))

    def _on_profile_remove(self, msg: pb.ActiveProfileRemove) -> None:
        self._index.set_profile(scalars.non_empty(msg.id.name, "id.name"), None)

    _handlers: ClassVar[dict[type, Callable[[PolicyManager, Any], None]]] = {
        pb.ActivePolicyUpdate: _on_policy_update,
        pb.ActivePolicyRemove: _on_policy_remove,
        pb.ActiveProfileUpdate: _on_profile_update,
        pb.ActiveProfileRemove: _on_profile_remove,
    }
    handles: ClassVar[frozenset[type]] = frozenset(_handlers)

    def complete_deferred_work(self) -> None:
        self._index.flush_rules(self._sink)
