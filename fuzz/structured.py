"""Structure-aware mutation of frame streams, for the ``envelopes`` and ``managers`` targets.

libFuzzer's byte mutations almost never keep an 8-byte length prefix right,
let alone a protobuf body parseable, so the structured targets mutate at
three levels instead, keeping the frames well-formed:

* the stream: drop, duplicate, move or splice whole frames, insert a new
  envelope of a random payload type, change the header (release, knobs);
* the envelope, parsed with the driver's schema: set one field anywhere in
  it to an interesting value (addresses and CIDRs valid and not, ports,
  protocol names, boundary integers, strings taken from elsewhere in the
  input so that references between messages line up), add, copy or delete
  repeated elements and map entries;
* the body's bytes, with libFuzzer's own mutator (what a v3.30-v3.31 frame,
  which today's schema cannot parse, gets; and any frame sometimes).

An input that is not header + whole frames falls back to libFuzzer's byte
mutator. Nothing here imports atheris: :mod:`fuzz.target` passes its
``Mutate`` in.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from typing import Any, cast

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from dataplane.wire._pb import felixbackend_pb2 as pb
from fuzz.common import HEADER_BYTES

__all__ = ["ByteMutator", "StructuredMutator", "join_frames", "split_frames"]

ByteMutator = Callable[[bytes, int], bytes]

_LENGTH = struct.Struct("<Q")
_PAYLOADS = [
    f.name for f in pb.ToDataplane.DESCRIPTOR.oneofs_by_name["payload"].fields if f.message_type
]
_MAX_DEPTH = 6
# types-protobuf types a descriptor as the pure-Python one or upb's, whose
# attributes it leaves as object; these are the pure-Python ones' types.
_SEQUENCE_NUMBER = cast(
    FieldDescriptor, pb.ToDataplane.DESCRIPTOR.fields_by_name["sequence_number"]
)

_STRINGS = (
    "",
    " ",
    "0",
    "-1",
    "1",
    "65535",
    "65536",
    "10.0.0.1",
    "10.0.0.999",
    "010.0.0.1",
    "10.0.0.0/8",
    "10.0.0.1/32",
    "10.0.0.1/33",
    "0.0.0.0/0",
    "192.168.1.1/24",
    "::",
    "::1",
    "fd00::1",
    "fd00::/64",
    "::/0",
    "fe80::1%eth0",
    "::ffff:10.0.0.1",
    "fd00::1/129",
    "10.0.0.1,tcp:80",
    "fd00::1,udp:53",
    "10.0.0.1,sctp:65536",
    "10.0.0.1,icmp:1",
    "tcp",
    "udp",
    "sctp",
    "icmp",
    "icmpv6",
    "TCP",
    "UDP",
    "SCTP",
    "allow",
    "deny",
    "pass",
    "log",
    "next-tier",
    "Deny",
    "Pass",
    "Allow",
    "ClusterIP",
    "NodePort",
    "LoadBalancer",
    "ExternalName",
    "Cluster",
    "Local",
    "ClientIP",
    "None",
    "00:11:22:33:44:55",
    "01:00:5e:00:00:01",
    "ee:ee:ee:ee:ee:ee:ee",
    "cali0123456789a",
    "cali0123456789abcdef",
    "eth0",
    "lo",
    "*",
    "/",
    "a/b/c",
    "ns/knp.default.x",
    "ns/staged:knp.default.x",
    "staged:x",
    "default",
    "GlobalNetworkPolicy",
    "NetworkPolicy",
    "KubernetesNetworkPolicy",
    "StagedNetworkPolicy",
    "StagedGlobalNetworkPolicy",
    "StagedKubernetesNetworkPolicy",
    "s:abc",
    "n:abc",
    "node-a",
    "k8s",
    "true",
    "false",
    "1.5",
    "nan",
    "inf",
    "tcp:22,udp:68",
    "1:2",
    "30000:32767",
    "\x00",
    "\n",
    "é",
    "\u202e",
    "x" * 300,
)
_FLOATS = (0.0, -0.0, 1.0, -1.0, 1e-9, 1e308, float("inf"), float("-inf"), float("nan"))
_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(1 << 31), (1 << 31) - 1),
    FieldDescriptor.TYPE_SINT32: (-(1 << 31), (1 << 31) - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(1 << 31), (1 << 31) - 1),
    FieldDescriptor.TYPE_INT64: (-(1 << 63), (1 << 63) - 1),
    FieldDescriptor.TYPE_SINT64: (-(1 << 63), (1 << 63) - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(1 << 63), (1 << 63) - 1),
    FieldDescriptor.TYPE_UINT32: (0, (1 << 32) - 1),
    FieldDescriptor.TYPE_FIXED32: (0, (1 << 32) - 1),
    FieldDescriptor.TYPE_UINT64: (0, (1 << 64) - 1),
    FieldDescriptor.TYPE_FIXED64: (0, (1 << 64) - 1),
}
_INTS: tuple[int, ...] = (0, 1, -1, 2, 4, 6, 17, 58, 255, 256, 4789, 65535, 65536, 86400, 86401)
_INTS += ((1 << 31) - 1, -(1 << 31), (1 << 32) - 1, (1 << 63) - 1, -(1 << 63), (1 << 64) - 1)


def split_frames(data: bytes) -> tuple[bytes, list[bytes]] | None:
    """Header and frame bodies, or None unless ``data`` is exactly header + whole frames."""
    if len(data) < HEADER_BYTES:
        return None
    bodies: list[bytes] = []
    pos = HEADER_BYTES
    while pos < len(data):
        if len(data) - pos < _LENGTH.size:
            return None
        (length,) = _LENGTH.unpack_from(data, pos)
        start = pos + _LENGTH.size
        if len(data) - start < length:
            return None
        bodies.append(data[start : start + length])
        pos = start + length
    return data[:HEADER_BYTES], bodies


def join_frames(header: bytes, bodies: list[bytes]) -> bytes:
    return header + b"".join(_LENGTH.pack(len(b)) + b for b in bodies)


def _parse(body: bytes) -> pb.ToDataplane | None:
    try:
        return pb.ToDataplane.FromString(body)
    except DecodeError:
        return None


def _strings(message: Message, out: list[str], depth: int = 0) -> None:
    """Every string value in ``message``, for cross-references between mutated messages."""
    for field, value in message.ListFields():
        if field.type == FieldDescriptor.TYPE_STRING:
            out.extend(value if field.is_repeated else [value])
        elif field.message_type is not None and depth < _MAX_DEPTH:
            if field.message_type.GetOptions().map_entry:
                for key, item in value.items():
                    if isinstance(key, str):
                        out.append(key)
                    if isinstance(item, str):
                        out.append(item)
                    elif isinstance(item, Message):
                        _strings(item, out, depth + 1)
            elif field.is_repeated:
                for item in value:
                    _strings(item, out, depth + 1)
            else:
                _strings(value, out, depth + 1)


class _Mutation:
    """One mutation of one parsed envelope."""

    def __init__(self, rng: random.Random, pool: list[str]) -> None:
        self.rng = rng
        self.pool = pool

    def string(self, current: str) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.4 and self.pool:
            return rng.choice(self.pool)
        if r < 0.75:
            return rng.choice(_STRINGS)
        if not current:
            return rng.choice(_STRINGS) + rng.choice(_STRINGS)
        i = rng.randrange(len(current) + 1)
        edits = (
            current[:i],
            current[i:],
            current[:i] + rng.choice("0:/.,-_ aZ\x00é") + current[i:],
            current[:i] + current[i + 1 :],
            current + current,
            current.upper(),
            current + rng.choice(_STRINGS),
        )
        return rng.choice(edits)

    def scalar(self, field: FieldDescriptor, current: Any) -> Any:
        rng = self.rng
        kind = field.type
        if kind == FieldDescriptor.TYPE_STRING:
            return self.string(current if isinstance(current, str) else "")
        if kind == FieldDescriptor.TYPE_BYTES:
            return self.string("").encode()
        if kind == FieldDescriptor.TYPE_BOOL:
            return not current
        if kind in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
            return rng.choice(_FLOATS)
        if kind == FieldDescriptor.TYPE_ENUM:
            assert field.enum_type is not None
            values = [v.number for v in field.enum_type.values]
            return rng.choice([*values, max(values) + 1, -1, 99])
        low, high = _INT_RANGES.get(kind, (0, 0))
        if rng.random() < 0.3 and isinstance(current, int):
            value = current + rng.choice((-1, 1, -256, 256))
        else:
            value = rng.choice(_INTS)
        return min(max(value, low), high)

    def message(self, message: Message, depth: int = 0) -> None:
        fields = cast(list[FieldDescriptor], message.DESCRIPTOR.fields)
        if not fields:
            message.SetInParent()
            return
        field = self.rng.choice(fields)
        try:
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                self.map(getattr(message, field.name), field.message_type, depth)
            elif field.message_type is not None:
                self.composite(message, field, depth)
            elif field.is_repeated:
                self.repeated_scalar(getattr(message, field.name), field)
            else:
                setattr(message, field.name, self.scalar(field, getattr(message, field.name)))
        except (ValueError, TypeError, OverflowError):
            pass  # a value the runtime refuses (e.g. an enum it is strict about)

    def composite(self, message: Message, field: FieldDescriptor, depth: int) -> None:
        rng = self.rng
        if field.is_repeated:
            items = getattr(message, field.name)
            r = rng.random()
            if not items or r < 0.35:
                item = items.add()
                if depth < _MAX_DEPTH:
                    self.message(item, depth + 1)
            elif r < 0.5:
                del items[rng.randrange(len(items))]
            elif r < 0.6:
                items.add().CopyFrom(items[rng.randrange(len(items))])
            elif depth < _MAX_DEPTH:
                self.message(items[rng.randrange(len(items))], depth + 1)
        elif message.HasField(field.name) and rng.random() < 0.15:
            message.ClearField(field.name)
        else:
            child = getattr(message, field.name)
            child.SetInParent()
            if depth < _MAX_DEPTH:
                self.message(child, depth + 1)

    def repeated_scalar(self, items: Any, field: FieldDescriptor) -> None:
        rng = self.rng
        r = rng.random()
        if not items or r < 0.4:
            items.insert(rng.randrange(len(items) + 1), self.scalar(field, None))
        elif r < 0.6:
            del items[rng.randrange(len(items))]
        elif r < 0.7:
            items.append(items[rng.randrange(len(items))])
        else:
            i = rng.randrange(len(items))
            items[i] = self.scalar(field, items[i])

    def map(self, entries: Any, entry: Descriptor, depth: int) -> None:
        rng = self.rng
        key_field = entry.fields_by_name["key"]
        value_field = entry.fields_by_name["value"]
        if entries and rng.random() < 0.3:
            del entries[rng.choice(list(entries))]
            return
        if entries and rng.random() < 0.5:
            key = rng.choice(list(entries))
        else:
            key = self.scalar(key_field, None)
        if value_field.message_type is not None:
            if depth < _MAX_DEPTH:
                self.message(entries[key], depth + 1)
        else:
            entries[key] = self.scalar(value_field, entries.get(key))


class StructuredMutator:
    """libFuzzer custom mutator and crossover over header + frame streams."""

    def __init__(self, byte_mutate: ByteMutator) -> None:
        self.byte_mutate = byte_mutate

    def mutate(self, data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        split = split_frames(data)
        if split is None or rng.random() < 0.03:
            return self.byte_mutate(data, max_size)
        header, bodies = split
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            header, bodies = self._once(rng, header, bodies)
        return self._fit(rng, header, bodies, max_size)

    def crossover(self, data1: bytes, data2: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        one, two = split_frames(data1), split_frames(data2)
        if one is None or two is None or not two[1]:
            return data1[:max_size]
        header, bodies = one
        others = two[1]
        if rng.random() < 0.5:  # a prefix of one, a suffix of the other
            cut = rng.randrange(len(bodies) + 1)
            bodies = bodies[:cut] + others[rng.randrange(len(others)) :]
        else:  # a few of the other's frames, inserted
            bodies = list(bodies)
            for _ in range(rng.randint(1, 3)):
                bodies.insert(rng.randrange(len(bodies) + 1), rng.choice(others))
        return self._fit(rng, header, bodies, max_size)

    def _once(
        self, rng: random.Random, header: bytes, bodies: list[bytes]
    ) -> tuple[bytes, list[bytes]]:
        bodies = list(bodies)
        r = rng.random()
        if not bodies or r < 0.06:
            bodies.insert(rng.randrange(len(bodies) + 1), self._new_envelope(rng, bodies))
        elif r < 0.55:
            i = rng.randrange(len(bodies))
            bodies[i] = self._mutate_envelope(rng, bodies, i)
        elif r < 0.72:
            i = rng.randrange(len(bodies))
            bodies[i] = self.byte_mutate(bodies[i], len(bodies[i]) + 64)
        elif r < 0.78:
            del bodies[rng.randrange(len(bodies))]
        elif r < 0.84:
            bodies.insert(rng.randrange(len(bodies) + 1), rng.choice(bodies))
        elif r < 0.90:
            bodies.insert(rng.randrange(len(bodies) + 1), bodies.pop(rng.randrange(len(bodies))))
        else:
            head = bytearray(header)
            i = rng.randrange(HEADER_BYTES)
            head[i] = rng.randrange(256) if rng.random() < 0.5 else (head[i] + 1) % 256
            header = bytes(head)
        return header, bodies

    def _pool(self, rng: random.Random, bodies: list[bytes]) -> list[str]:
        pool: list[str] = []
        for body in rng.sample(bodies, min(len(bodies), 8)):
            envelope = _parse(body)
            if envelope is not None:
                _strings(envelope, pool)
        return pool

    def _mutate_envelope(self, rng: random.Random, bodies: list[bytes], i: int) -> bytes:
        envelope = _parse(bodies[i])
        if envelope is None:  # e.g. a v3.30-v3.31 policy frame: bytes only
            return self.byte_mutate(bodies[i], len(bodies[i]) + 64)
        mutation = _Mutation(rng, self._pool(rng, bodies))
        kind = envelope.WhichOneof("payload")
        for _ in range(rng.choice((1, 1, 2, 3))):
            if kind is not None and rng.random() < 0.9:
                mutation.message(getattr(envelope, kind))
            elif rng.random() < 0.5:
                seq = mutation.scalar(_SEQUENCE_NUMBER, envelope.sequence_number)
                envelope.sequence_number = seq
            else:
                kind = rng.choice(_PAYLOADS)
                getattr(envelope, kind).SetInParent()
        return envelope.SerializeToString()

    def _new_envelope(self, rng: random.Random, bodies: list[bytes]) -> bytes:
        envelope = pb.ToDataplane(sequence_number=len(bodies) + 1)
        kind = rng.choice(_PAYLOADS)
        payload = getattr(envelope, kind)
        payload.SetInParent()
        mutation = _Mutation(rng, self._pool(rng, bodies))
        for _ in range(rng.randint(1, 6)):
            mutation.message(payload)
        return envelope.SerializeToString()

    @staticmethod
    def _fit(rng: random.Random, header: bytes, bodies: list[bytes], max_size: int) -> bytes:
        out = join_frames(header, bodies)
        while len(out) > max_size and len(bodies) > 1:
            bodies = list(bodies)
            del bodies[rng.randrange(len(bodies))]
            out = join_frames(header, bodies)
        return out[:max_size]
