"""The protobuf wire format, read and written by field, without a schema.

Older Felix releases put other types at some of today's field numbers
(``TierInfo.ingress_policies`` was ``repeated string`` where it is now
``repeated PolicyID``). A generated parser cannot read those bytes, so the
few paths that differ are rewritten at this level before parsing
(:mod:`dataplane.wire.legacy_policy`). Only what that needs is here: varints,
tags, and walking the top-level fields of one message.

Every function takes and returns plain ``bytes``; a malformed buffer raises
:class:`WireError` (a ``ValueError``) naming the offset.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

__all__ = [
    "LEN",
    "VARINT",
    "Field",
    "WireError",
    "encode_len",
    "encode_varint",
    "iter_fields",
]

VARINT = 0
I64 = 1
LEN = 2
I32 = 5


class WireError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


class Field(NamedTuple):
    """One field occurrence: its number, wire type and where it lies.

    ``raw`` is the whole occurrence (tag included), for copying it unchanged;
    ``value`` is the varint's value, or the payload of a length-delimited
    field (``b""`` for fixed-width ones, which no rewrite here needs).
    """

    number: int
    wire_type: int
    value: int | bytes
    raw: bytes


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise WireError(f"varint runs past the end at byte {pos}")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError(f"varint longer than 10 bytes at byte {pos}")


def iter_fields(buf: bytes) -> Iterator[Field]:
    """The top-level fields of one serialized message, in wire order."""
    pos = 0
    end = len(buf)
    while pos < end:
        start = pos
        key, pos = _varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireError(f"field number 0 at byte {start}")
        value: int | bytes = b""
        if wire_type == VARINT:
            value, pos = _varint(buf, pos)
        elif wire_type == LEN:
            length, pos = _varint(buf, pos)
            if pos + length > end:
                raise WireError(f"field {number} at byte {start} runs past the end")
            value = buf[pos : pos + length]
            pos += length
        elif wire_type == I64:
            pos += 8
        elif wire_type == I32:
            pos += 4
        else:  # groups (3, 4) were never in Felix's proto3 schema
            raise WireError(f"field {number} at byte {start} has wire type {wire_type}")
        if pos > end:
            raise WireError(f"field {number} at byte {start} runs past the end")
        yield Field(number, wire_type, value, buf[start:pos])


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def encode_len(number: int, payload: bytes) -> bytes:
    """A length-delimited field (string, bytes or sub-message)."""
    return encode_varint(number << 3 | LEN) + encode_varint(len(payload)) + payload
