"""EnvelopeDecoder parses a frame before looking at its bytes: the same envelopes,
the same refusals, as when each frame was walked in Python first."""

from __future__ import annotations

from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.decode import EnvelopeDecoder, _peek
from dataplane.wire.legacy_policy import POLICY_PAYLOADS
from dataplane.wire.pbwire import WireError, encode_len, encode_varint

_KINDS = [f.number for f in pb.ToDataplane.DESCRIPTOR.oneofs_by_name["payload"].fields]


def _walked_then_parsed(body: bytes) -> pb.ToDataplane | str | None:
    """The way before: the bytes walked, then parsed unless a policy frame
    (None: that frame goes on to the format's look, both ways)."""
    try:
        number, _ = _peek(body)
        if number in POLICY_PAYLOADS:
            return None
        return pb.ToDataplane.FromString(body)
    except (DecodeError, WireError):
        return "refused"


def _now(body: bytes) -> pb.ToDataplane | str:
    try:
        return EnvelopeDecoder().decode(body)
    except (DecodeError, WireError):
        return "refused"


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """Envelopes as Felix frames them (a sequence number, one payload of
    any kind, its bytes drawn: most are no message of that kind), or bytes
    of no shape at all."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=64))
    number = draw(st.sampled_from(_KINDS))
    payload = draw(st.binary(max_size=48))
    body = encode_varint(1 << 3) + encode_varint(draw(st.integers(0, 1 << 40)))
    return body + encode_len(number, payload)


@settings(max_examples=2000)
@given(frames())
def test_a_frame_decodes_or_is_refused_as_before(body: bytes) -> None:
    before = _walked_then_parsed(body)
    if before is None:
        return  # a policy frame: the same path after, both ways
    assert _now(body) == before
