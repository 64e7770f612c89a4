"""HostsManager: nodes' metadata and the encapsulation in use, as model values.

Felix has sent a node's addresses three ways over its releases:
``HostMetadataUpdate`` with the IPv4 address only plus a separate
``HostMetadataV6Update``; ``HostMetadataV4V6Update`` with both; and now
``HostMetadataUpdate`` with both, in CIDR form. All are merged into one
:class:`~dataplane.model.hosts.Host` per node: an update without an IPv6
address keeps the one a V6 update gave; a V6 remove clears only IPv6; a
(V4V6) remove removes the node. A diff store hands a platform only the
hosts that changed. ``Encapsulation`` is handed over when it differs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
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

    def _update(self, msg: Any, *, v4: bool, v6: bool) -> None:
        name = non_empty(msg.hostname, "hostname")
        old = self._hosts.get(name) or Host(name)
        new = old
        if v4:
            ipv4, prefix4 = host_address(msg.ipv4_addr, "ipv4_addr", 4)
            new = replace(new, ipv4=ipv4, ipv4_prefix=prefix4)
        if v6 and msg.ipv6_addr:
            ipv6, prefix6 = host_address(msg.ipv6_addr, "ipv6_addr", 6)
            new = replace(new, ipv6=ipv6, ipv6_prefix=prefix6)
        if hasattr(msg, "labels"):
            for key in msg.labels:
                if not key:
                    raise InputError("labels", "", "an empty label name")
            new = replace(new, asnumber=msg.asnumber, labels=tuple(sorted(msg.labels.items())))
        self._hosts.set(name, new)

    def _on_update(self, msg: pb.HostMetadataUpdate) -> None:
        self._update(msg, v4=True, v6=True)

    def _on_v6_update(self, msg: pb.HostMetadataV6Update) -> None:
        self._update(msg, v4=False, v6=True)

    def _on_remove(self, msg: pb.HostMetadataRemove) -> None:
        self._hosts.delete(non_empty(msg.hostname, "hostname"))

    def _on_v6_remove(self, msg: pb.HostMetadataV6Remove) -> None:
        name = non_empty(msg.hostname, "hostname")
        old = self._hosts.get(name)
        if old is not None:
            self._hosts.set(name, replace(old, ipv6="", ipv6_prefix=0))

    def _on_encapsulation(self, msg: pb.Encapsulation) -> None:
        self._encapsulation = Encapsulation(
            msg.ipip_enabled, msg.vxlan_enabled, msg.vxlan_enabled_v6, msg.no_encap_enabled
        )

    _handlers: ClassVar[dict[type, Callable[[HostsManager, Any], None]]] = {
        pb.HostMetadataUpdate: _on_update,
        pb.HostMetadataV4V6Update: _on_update,
        pb.HostMetadataV6Update: _on_v6_update,
        pb.HostMetadataRemove: _on_remove,
        pb.HostMetadataV4V6Remove: _on_remove,
        pb.HostMetadataV6Remove: _on_v6_remove,
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
