"""Platform-neutral managers: one slice of desired state each.

A manager has two methods (Felix's shape):

* ``on_update(msg)`` -- called for every incoming payload, cheap, in memory;
  records desired state and marks it dirty. Raises
  :class:`~dataplane.errors.InputError` to reject an invalid message, and
  then must have changed nothing.
* ``configure(config)`` (optional) -- a new configuration from ConfigUpdate.
* ``handles`` (optional) -- the payload types ``on_update`` acts on; the
  loop then calls it for those only.
* ``complete_deferred_work()`` -- called once per apply, after InSync; hands
  what changed to the platform's sinks as model values.

Nothing in this package imports a platform (linux/, windows/) or does I/O.
"""

from __future__ import annotations

from typing import Protocol

from google.protobuf.message import Message

from dataplane.managers.endpoints import EndpointManager
from dataplane.managers.hosts import HostsManager
from dataplane.managers.ipsets import IPSetsManager
from dataplane.managers.policy import PolicyManager
from dataplane.managers.pools import PoolsManager
from dataplane.managers.routes import RoutesManager
from dataplane.managers.services import ServicesManager

__all__ = [
    "EndpointManager",
    "HostsManager",
    "IPSetsManager",
    "Manager",
    "PolicyManager",
    "PoolsManager",
    "RoutesManager",
    "ServicesManager",
]


class Manager(Protocol):
    def on_update(self, msg: Message) -> None: ...

    def complete_deferred_work(self) -> None: ...
