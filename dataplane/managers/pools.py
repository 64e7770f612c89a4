"""PoolsManager: IPAM pools (for NAT-outgoing and the all-pools set)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from google.protobuf.message import Message

from dataplane.core.platform import PoolsSink
from dataplane.managers import scalars
from dataplane.model import IPPool
from dataplane.wire._pb import felixbackend_pb2 as pb


class PoolsManager:
    def __init__(self, sink: PoolsSink) -> None:
        self._sink = sink
        self._pools: dict[str, IPPool | None] = {}

    def on_update(self, msg: Message) -> None:
        handler = self._handlers.get(type(msg))
        if handler is not None:
            handler(self, msg)

    def _on_update(self, msg: pb.IPAMPoolUpdate) -> None:
        pool_id = scalars.non_empty(msg.id, "id")
        self._pools[pool_id] = IPPool(
            scalars.cidr(msg.pool.cidr, "pool.cidr"), masquerade=msg.pool.masquerade
        )

    def _on_remove(self, msg: pb.IPAMPoolRemove) -> None:
        self._pools[scalars.non_empty(msg.id, "id")] = None

    _handlers: ClassVar[dict[type, Callable[[PoolsManager, Any], None]]] = {
        pb.IPAMPoolUpdate: _on_update,
        pb.IPAMPoolRemove: _on_remove,
    }
    handles: ClassVar[frozenset[type]] = frozenset(_handlers)

    def complete_deferred_work(self) -> None:
        for pool_id, pool in self._pools.items():
            if pool is None:
                self._sink.remove_ip_pool(pool_id)
            else:
                self._sink.set_ip_pool(pool_id, pool)
        self._pools.clear()
