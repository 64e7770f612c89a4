"""HostsManager: nodes' metadata and the encapsulation in use, as model values.

Master's meaning only: a ``HostMetadataUpdate`` is the node's whole
metadata (addresses in CIDR or bare form, AS number, labels) and replaces
what was known; a ``HostMetadataRemove`` removes the node. Older releases
split that over three streams; the wire layer merges them into these two
messages before they get here (:mod:`dataplane.wire.legacy_hosts`). A diff
store hands a platform only the hosts that changed. ``Encapsulation`` is
handed over when it differs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from google.protobuf.message import Message

from dataplane.core.diffstore import DiffStore
from dataplane.core.platform import HostsSink
from dataplane.errors import InputError
from dataplane.managers.scalars import address, cidr, non_empty
from dataplane.model.hosts import Encapsulation, Host
from dataplane.wire._pb import felixbackend_pb2 as pb

__all__ = ["HostsManager", "host_address"]


def host_address(text: str, field: str, version: int) -> tuple[str, int]:
    """("" , 0) for empty text, else the canonical address and the prefix length sent (0: none)."""
    if not text:
        return "", 0
    network = cidr(text, field, version)  # validates address and length, names the whole text
    base, _, length = text.partition("/")
    return address(base, field, version), int(network.partition("/")[2]) if length else 0


class HostsManager:
    def __init__(self, sink: HostsSink) -> None:
        self._sink = sink
        self._hosts: DiffStore[str, Host] = DiffStore()
        self._encapsulation: Encapsulation | None = None
        self._handed: Encapsulation | None = None

    def on_update(self, msg: Message) -> None:
        handler = self._handlers.get(type(msg))
        if handler is not None:
            handler(self, msg)

    def _on_update(self, msg: pb.HostMetadataUpdate) -> None:
        name = non_empty(msg.hostname, "hostname")
        ipv4, prefix4 = host_address(msg.ipv4_addr, "ipv4_addr", 4)
        ipv6, prefix6 = host_address(msg.ipv6_addr, "ipv6_addr", 6)
        for key in msg.labels:
            if not key:
                raise InputError("labels", "", "an empty label name")
        labels = tuple(sorted(msg.labels.items()))
        self._hosts.set(name, Host(name, ipv4, ipv6, prefix4, prefix6, msg.asnumber, labels))

    def _on_remove(self, msg: pb.HostMetadataRemove) -> None:
        self._hosts.delete(non_empty(msg.hostname, "hostname"))

    def _on_encapsulation(self, msg: pb.Encapsulation) -> None:
        self._encapsulation = Encapsulation(
            msg.ipip_enabled, msg.vxlan_enabled, msg.vxlan_enabled_v6, msg.no_encap_enabled
        )

    _handlers: ClassVar[dict[type, Callable[[HostsManager, Any], None]]] = {
        pb.HostMetadataUpdate: _on_update,
        pb.HostMetadataRemove: _on_remove,
        pb.Encapsulation: _on_encapsulation,
    }
    handles: ClassVar[frozenset[type]] = frozenset(_handlers)

    def complete_deferred_work(self) -> None:
        changes = self._hosts.commit()
        for name in sorted(changes.deletes):
            self._sink.remove_host(name)
        for name in sorted(changes.upserts):
            self._sink.set_host(changes.upserts[name])
        if self._encapsulation is not None and self._encapsulation != self._handed:
            self._handed = self._encapsulation
            self._sink.set_encapsulation(self._encapsulation)
