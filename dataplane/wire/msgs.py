"""Envelopes and payloads: wrapping, unwrapping, naming.

The loop, the transport and the log tools all need to go between a payload
message (``pb.IPSetUpdate``) and its envelope (``pb.ToDataplane``); this
module is the one place that knows the oneof field names.
"""

from __future__ import annotations

from google.protobuf.message import Message

from dataplane.wire._pb import felixbackend_pb2 as pb

__all__ = ["from_dataplane", "payload_of", "to_dataplane"]


def _fields_by_type(envelope: type[Message]) -> dict[str, str]:
    oneof = envelope.DESCRIPTOR.oneofs_by_name["payload"]
    return {f.message_type.full_name: f.name for f in oneof.fields if f.message_type}


_TO_FIELDS = _fields_by_type(pb.ToDataplane)
_FROM_FIELDS = _fields_by_type(pb.FromDataplane)


def _field_for(fields: dict[str, str], payload: Message, envelope: str) -> str:
    try:
        return fields[payload.DESCRIPTOR.full_name]
    except KeyError:
        raise TypeError(f"{type(payload).__name__} is not a {envelope} payload") from None


def to_dataplane(payload: Message, seq: int) -> pb.ToDataplane:
    """Wrap a payload (or re-number an envelope) as a ``ToDataplane``."""
    if isinstance(payload, pb.ToDataplane):
        env = pb.ToDataplane()
        env.CopyFrom(payload)
        env.sequence_number = seq
        return env
    env = pb.ToDataplane(sequence_number=seq)
    getattr(env, _field_for(_TO_FIELDS, payload, "ToDataplane")).CopyFrom(payload)
    return env


def from_dataplane(payload: Message, seq: int) -> pb.FromDataplane:
    env = pb.FromDataplane(sequence_number=seq)
    getattr(env, _field_for(_FROM_FIELDS, payload, "FromDataplane")).CopyFrom(payload)
    return env


def payload_of(envelope: pb.ToDataplane | pb.FromDataplane) -> Message:
    kind = envelope.WhichOneof("payload")
    if kind is None:
        raise ValueError("envelope has no payload")
    payload: Message = getattr(envelope, kind)
    return payload
