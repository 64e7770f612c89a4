"""Felix v3.30-v3.32 host metadata, merged into today's one message per node.

Up to v3.32 Felix's event sequencer sends a node's addresses in three
independent streams, each with its own update and remove:

* ``HostMetadataUpdate``/``Remove`` (14/18): the node's IPv4 address, bare
  (``10.0.0.1``); the node's "host IP".
* ``HostMetadataV6Update``/``Remove`` (35/36): its IPv6 address, bare.
* ``HostMetadataV4V6Update``/``Remove`` (37/38): both addresses in CIDR form
  (``10.0.0.1/24``, which CrossSubnet needs), the AS number and the labels.

v3.33 (master) sends only 14/18, the update carrying everything 37 did. The
:class:`LegacyHosts` merger keeps, per node, the latest of each stream and
turns every old message into the update (or remove) master would have sent
for the merged state: the v4v6 stream's CIDR address where it agrees with
the bare one, else the bare one; a node is removed when no stream holds
anything for it.
So the managers only ever see master's meaning, whichever release spoke.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dataplane.wire._pb import felixbackend_pb2 as pb

__all__ = ["LEGACY_HOST_PAYLOADS", "LegacyHosts"]

LEGACY_HOST_PAYLOADS = frozenset(
    {
        "host_metadata_update",
        "host_metadata_remove",
        "host_metadata_v6_update",
        "host_metadata_v6_remove",
        "host_metadata_v4v6_update",
        "host_metadata_v4v6_remove",
    }
)


@dataclass(frozen=True, slots=True)
class _Full:
    """What a v4v6 update said: addresses in CIDR form, AS number, labels."""

    ipv4: str
    ipv6: str
    asnumber: str
    labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class _Node:
    ipv4: str = ""  # host IP stream (14/18)
    ipv6: str = ""  # IPv6 stream (35/36)
    full: _Full | None = None  # v4v6 stream (37/38)

    @property
    def empty(self) -> bool:
        return not (self.ipv4 or self.ipv6 or self.full)


class LegacyHosts:
    """Merges the three old host streams into master's HostMetadataUpdate/Remove."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {}

    def translate(self, kind: str, msg: object, seq: int) -> pb.ToDataplane | None:
        """The master envelope for old host message ``msg`` of ``kind``.

        None when it changes nothing master would report (a remove for a
        node never seen): there is then nothing to hand on.
        """
        name: str = getattr(msg, "hostname")  # noqa: B009 - every host message has one
        old = self._nodes.get(name, _Node())
        new = self._apply(kind, msg, old)
        if new.empty:
            self._nodes.pop(name, None)
            if old.empty:
                return None
            return pb.ToDataplane(
                sequence_number=seq, host_metadata_remove=pb.HostMetadataRemove(hostname=name)
            )
        self._nodes[name] = new
        return pb.ToDataplane(sequence_number=seq, host_metadata_update=_update(name, new))

    @staticmethod
    def _apply(kind: str, msg: object, node: _Node) -> _Node:
        if kind == "host_metadata_update":
            return replace(node, ipv4=getattr(msg, "ipv4_addr"))  # noqa: B009
        if kind == "host_metadata_remove":
            return replace(node, ipv4="")
        if kind == "host_metadata_v6_update":
            return replace(node, ipv6=getattr(msg, "ipv6_addr"))  # noqa: B009
        if kind == "host_metadata_v6_remove":
            return replace(node, ipv6="")
        if kind == "host_metadata_v4v6_update":
            assert isinstance(msg, pb.HostMetadataV4V6Update)
            full = _Full(msg.ipv4_addr, msg.ipv6_addr, msg.asnumber, tuple(msg.labels.items()))
            return replace(node, full=full)
        return replace(node, full=None)  # host_metadata_v4v6_remove


def _address(bare: str, cidr: str) -> str:
    """One address from the two streams that carry it.

    Felix fills both from the same Node field, so they agree but for the
    prefix, which only the CIDR form has. Should they differ, the bare one
    wins: it is what v3.32's own dataplane keys host addresses on.
    """
    if not cidr or (bare and cidr.partition("/")[0] != bare):
        return bare
    return cidr


def _update(name: str, node: _Node) -> pb.HostMetadataUpdate:
    full = node.full
    if full is None:
        return pb.HostMetadataUpdate(hostname=name, ipv4_addr=node.ipv4, ipv6_addr=node.ipv6)
    return pb.HostMetadataUpdate(
        hostname=name,
        ipv4_addr=_address(node.ipv4, full.ipv4),
        ipv6_addr=_address(node.ipv6, full.ipv6),
        asnumber=full.asnumber,
        labels=dict(full.labels),
    )
