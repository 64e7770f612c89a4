"""Frame codec: round trips, chunking, and every kind of malformed stream."""

from __future__ import annotations

import itertools
import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.errors import ProtocolError
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import FrameDecoder, encode_frame, encode_frames
from dataplane.wire.msglog import envelopes

MESSAGES = envelopes(
    [
        pb.ConfigUpdate(config={"InterfacePrefix": "cali"}),
        pb.IPSetUpdate(id="s:a", members=["10.0.0.1", "10.0.0.2"]),
        pb.IPSetDeltaUpdate(id="s:a", added_members=["10.0.0.3"]),
        pb.ActivePolicyUpdate(id=pb.PolicyID(name="p"), policy=pb.Policy(tier="default")),
        pb.InSync(),
    ]
)
STREAM = encode_frames(MESSAGES)


def test_round_trip_in_one_feed() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(STREAM) == MESSAGES
    decoder.close()
    assert decoder.last_good_seq == 5
    assert decoder.offset == len(STREAM)


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=20))
def test_any_chunking_yields_the_same_envelopes(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM)]
    decoder = FrameDecoder()
    out = []
    for lo, hi in itertools.pairwise(bounds):
        out += decoder.feed(STREAM[lo:hi])
    decoder.close()
    assert out == MESSAGES


def _error(data: bytes, *, max_frame_bytes: int = 1 << 20) -> ProtocolError:
    decoder = FrameDecoder(max_frame_bytes)
    with pytest.raises(ProtocolError) as info:
        decoder.feed(data)
        decoder.close()
    return info.value


def test_oversize_length_names_offset_frame_and_last_seq() -> None:
    good = encode_frames(MESSAGES[:2])
    err = _error(good + struct.pack("<Q", 1 << 40) + b"x" * 10)
    assert (err.offset, err.frame_index, err.last_good_seq) == (len(good), 2, 2)
    assert f"byte offset {len(good)} (frame 2, last good seq 2)" in str(err)
    assert "exceeds the limit" in str(err)


def test_envelopes_before_a_bad_frame_come_out_before_the_error() -> None:
    # Found by fuzzing: they were lost when they arrived in the same feed.
    decoder = FrameDecoder()
    bad = struct.pack("<Q", 2) + b"\xff\xff"
    assert decoder.feed(STREAM + bad) == MESSAGES
    where = f"byte offset {len(STREAM)} (frame 5, last good seq 5)"
    with pytest.raises(ProtocolError, match=re.escape(where)):
        decoder.feed(b"more")
    with pytest.raises(ProtocolError, match=re.escape(where)):
        decoder.close()


def test_truncated_body_at_end_of_input() -> None:
    err = _error(STREAM[:-3])
    assert err.frame_index == 4 and err.last_good_seq == 4
    assert "truncated frame" in str(err)


def test_truncated_length_prefix() -> None:
    err = _error(STREAM + b"\x01\x02")
    assert err.offset == len(STREAM) and "of an 8-byte length" in str(err)


def test_garbage_body_is_undecodable() -> None:
    body = b"\xff\xff\xff\xff\xff\xff"
    err = _error(struct.pack("<Q", len(body)) + body)
    assert "undecodable envelope" in str(err)
    assert err.last_good_seq is None


def test_a_from_dataplane_envelope_is_rejected() -> None:
    wrong = pb.FromDataplane(
        sequence_number=7, process_status_update=pb.ProcessStatusUpdate(iso_timestamp="t")
    )
    assert "not a ToDataplane envelope" in str(_error(encode_frame(wrong)))


def test_a_from_dataplane_envelope_without_sequence_number_is_rejected() -> None:
    wrong = pb.FromDataplane(
        process_status_update=pb.ProcessStatusUpdate(iso_timestamp="t", uptime=3.5)
    )
    assert "not a ToDataplane envelope" in str(_error(encode_frame(wrong)))


def test_empty_envelope_has_no_payload() -> None:
    assert "no payload" in str(_error(struct.pack("<Q", 0)))


def test_unknown_payload_from_newer_felix_is_skipped() -> None:
    # Field 999, length-delimited: a payload type this schema lacks.
    unknown = b"\x78\x2a" + b"\xba\x3e\x02\x08\x01"  # seq=42, field 999 = {1: 1}
    stream = encode_frame(MESSAGES[0]) + struct.pack("<Q", len(unknown)) + unknown
    stream += encode_frame(MESSAGES[-1])
    decoder = FrameDecoder()
    assert decoder.feed(stream) == [MESSAGES[0], MESSAGES[-1]]
    assert decoder.skipped_unknown == 1


@settings(max_examples=400)
@given(st.binary(max_size=512), st.integers(min_value=1, max_value=64))
def test_random_bytes_never_escape_or_hang(data: bytes, chunk: int) -> None:
    decoder = FrameDecoder(max_frame_bytes=4096)
    try:
        for i in range(0, len(data), chunk):
            for envelope in decoder.feed(data[i : i + chunk]):
                assert envelope.WhichOneof("payload") is not None
        decoder.close()
    except ProtocolError as exc:
        assert exc.offset <= len(data)
        assert "\n" not in str(exc)
