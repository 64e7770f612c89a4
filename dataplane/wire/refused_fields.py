"""Which fields the driver refuses (``dataplane/felix_fields.py``) a message carries.

The table names fields by message; here they become paths from each
``ToDataplane`` payload (``workload_endpoint_update`` ->
``endpoint.qos_controls``), found once from the schema. A path runs
through singular message fields only and stops at the first refused one:
what sits inside a refused field goes with it, and no refused field lies
inside a repeated one (a Rule's, say). A scalar or repeated scalar field
whose entry names harmless values (``IPAMPool.allowed_uses``: only a pool
for load balancers alone matters) is refused only with another value.
Checking a message costs one presence test per path of its kind.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message

from dataplane.felix_dispositions import Refused
from dataplane.felix_fields import FIELDS
from dataplane.wire._pb import felixbackend_pb2 as pb

__all__ = ["RefusedFields"]

Path = tuple[str, ...]


# How a leaf is known to be set: a message by HasField, a repeated field by its
# length, a proto3 scalar by not being its zero value.
_MESSAGE, _REPEATED, _SCALAR = 0, 1, 2


def _walk(descriptor: Descriptor | None, prefix: Path) -> Iterator[tuple[Path, int, Refused]]:
    """Each refused field under ``descriptor``: its path, how it is known set, its entry."""
    if descriptor is None:  # a scalar payload: nothing inside
        return
    named = FIELDS.get(descriptor.name, {})
    for field in descriptor.fields:
        path = (*prefix, field.name)
        entry = named.get(field.name)
        inner = field.message_type
        if isinstance(entry, Refused):
            if field.is_repeated:
                yield path, _REPEATED, entry
            else:
                yield path, (_SCALAR if inner is None else _MESSAGE), entry
        elif inner is not None and not inner.GetOptions().map_entry and not field.is_repeated:
            yield from _walk(inner, path)


@dataclass(frozen=True, slots=True)
class _Leaves:
    """The refused fields under one parent of a payload, checked together."""

    parents: Path
    leaves: tuple[tuple[str, int, str, Refused], ...]  # name, mode, dotted path, entry

    def carried(self, message: Message) -> list[tuple[str, str]]:
        for name in self.parents:
            if not message.HasField(name):
                return []
            message = getattr(message, name)
        found = []
        for name, mode, path, refused in self.leaves:
            if mode == _MESSAGE:
                present = message.HasField(name)
            else:
                value = getattr(message, name)
                present = bool(len(value) if mode == _REPEATED else value)
                if present and refused.harmless is not None:
                    text = ",".join(map(str, value)) if mode == _REPEATED else str(value)
                    present = not refused.harmless(text)
            if present:
                found.append((path, refused.why))
        return found


class RefusedFields:
    """The refused fields each payload kind can carry, and which one message does."""

    def __init__(self) -> None:
        self._checks: dict[str, tuple[_Leaves, ...]] = {}
        self._whole: dict[str, str] = {}  # payloads refused whole (none today)
        oneof = pb.ToDataplane.DESCRIPTOR.oneofs_by_name["payload"]
        for field in oneof.fields:
            whole = FIELDS["ToDataplane"].get(field.name)
            if isinstance(whole, Refused):
                self._whole[field.name] = whole.why
                continue
            descriptor = cast(Descriptor | None, field.message_type)
            grouped: dict[Path, list[tuple[str, int, str, Refused]]] = {}
            for path, mode, refused in _walk(descriptor, ()):
                *parents, leaf = path
                dotted = ".".join((field.name, *path))
                grouped.setdefault(tuple(parents), []).append((leaf, mode, dotted, refused))
            if grouped:
                self._checks[field.name] = tuple(
                    _Leaves(parents, tuple(leaves)) for parents, leaves in grouped.items()
                )
        # Most messages are of kinds with nothing to check: one set lookup each.
        self.kinds = frozenset(self._checks) | frozenset(self._whole)

    def carried(self, kind: str, payload: Message) -> list[tuple[str, str]]:
        """(``kind.path``, why) of each refused field ``payload`` carries."""
        whole = self._whole.get(kind)
        if whole is not None:
            return [(kind, whole)]
        found: list[tuple[str, str]] = []
        for leaves in self._checks.get(kind, ()):
            found += leaves.carried(payload)
        return found
