"""PolicyManager: active policies and profiles, as model values."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from google.protobuf.message import Message

from dataplane._pb import felixbackend_pb2 as pb
from dataplane.managers import _convert
from dataplane.model import Policy, PolicyKey, Profile
from dataplane.platform import RulesSink


class PolicyManager:
    def __init__(self, sink: RulesSink) -> None:
        self._sink = sink
        # Last word per key since the previous apply; None means removed.
        self._policies: dict[PolicyKey, Policy | None] = {}
        self._profiles: dict[str, Profile | None] = {}

    def on_update(self, msg: Message) -> None:
        handler = self._handlers.get(type(msg))
        if handler is not None:
            handler(self, msg)

    def _on_policy_update(self, msg: pb.ActivePolicyUpdate) -> None:
        self._policies[_convert.policy_key(msg.id)] = _convert.policy(msg.policy)

    def _on_policy_remove(self, msg: pb.ActivePolicyRemove) -> None:
        self._policies[_convert.policy_key(msg.id)] = None

    def _on_profile_update(self, msg: pb.ActiveProfileUpdate) -> None:
        name = _convert.non_empty(msg.id.name, "id.name")
        self._profiles[name] = _convert.profile(msg.profile)

    def _on_profile_remove(self, msg: pb.ActiveProfileRemove) -> None:
        self._profiles[_convert.non_empty(msg.id.name, "id.name")] = None

    _handlers: ClassVar[dict[type, Callable[[PolicyManager, Any], None]]] = {
        pb.ActivePolicyUpdate: _on_policy_update,
        pb.ActivePolicyRemove: _on_policy_remove,
        pb.ActiveProfileUpdate: _on_profile_update,
        pb.ActiveProfileRemove: _on_profile_remove,
    }
    handles: ClassVar[frozenset[type]] = frozenset(_handlers)

    def complete_deferred_work(self) -> None:
        for key, policy in self._policies.items():
            if policy is None:
                self._sink.remove_policy(key)
            else:
                self._sink.set_policy(key, policy)
        for name, profile in self._profiles.items():
            if profile is None:
                self._sink.remove_profile(name)
            else:
                self._sink.set_profile(name, profile)
        self._policies.clear()
        self._profiles.clear()
