"""Target ``frames``: arbitrary bytes, in arbitrary chunkings, into a FrameDecoder.

The input (layout in :mod:`fuzz.common`) picks the release (auto or forced),
the frame size limit (byte 1) and a chunking (bytes 2-3); the rest is the
stream, mutated as raw bytes. The stream is decoded three times: one frame
per ``feed`` (the reference), all in one ``feed``, and in the chunking the
input picks. Checked:

* only :class:`~dataplane.errors.ProtocolError` escapes ``feed``/``close``;
  its text is one line naming the byte offset, the frame index and the last
  good sequence number, and the offset lies within the stream;
* every envelope handed out has a payload; after each ``feed``, consumed
  plus pending bytes equal the bytes fed (the decoder never loses track);
* the release detector never runs out of candidates, only narrows, and
  stays on a forced release;
* the chunking changes nothing: the same error, word for word, and the
  same envelopes, those before the bad frame included (a prefix of them is
  tolerated while known finding F1 is: see :mod:`fuzz.known`); without an
  error, all of the stream is consumed.

After an error the decoder is not used again: the stream is dead.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from dataplane.errors import ProtocolError
from dataplane.wire.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder
from dataplane.wire.releases import Release
from fuzz import known
from fuzz.common import (
    Finding,
    LogCapture,
    check_detector,
    check_protocol_error,
    frame_pieces,
    split_header,
)

__all__ = ["test_one_input"]

_LIMITS = (DEFAULT_MAX_FRAME_BYTES, 1 << 16, 4096, 64, 1)
_MAX_CHUNKS = 512
_LOGS = LogCapture.install()


@dataclass(slots=True)
class _Outcome:
    envelopes: list[bytes]
    error: str | None


def _chunks(stream: bytes, a: int, b: int) -> list[bytes]:
    rng = random.Random(a << 8 | b)
    steps = (1, 2, 7, 8, 9, 16, a + 1, b * 37 + 1, 4096)
    out: list[bytes] = []
    pos = 0
    while pos < len(stream):
        step = len(stream) - pos if len(out) == _MAX_CHUNKS else rng.choice(steps)
        out.append(stream[pos : pos + step])
        pos += step
    if rng.random() < 0.25:
        out.insert(rng.randrange(len(out) + 1), b"")  # an empty read mid-stream
    return out


def _decode(pieces: list[bytes], release: Release | None, limit: int, stream_len: int) -> _Outcome:
    decoder = FrameDecoder(limit, release)
    candidates = check_detector(decoder, frozenset(Release))
    out: list[bytes] = []
    fed = 0
    try:
        for piece in pieces:
            got = decoder.feed(piece)
            fed += len(piece)
            for envelope in got:
                if envelope.WhichOneof("payload") is None:
                    raise Finding(f"envelope without payload handed out: {envelope}")
                out.append(envelope.SerializeToString(deterministic=True))
            if decoder.offset + decoder.pending_bytes != fed:
                raise Finding(
                    f"fed {fed} bytes but consumed {decoder.offset}"
                    f" + pending {decoder.pending_bytes}"
                )
            candidates = check_detector(decoder, candidates)
        decoder.close()
    except ProtocolError as exc:
        check_protocol_error(exc, stream_len)
        return _Outcome(out, str(exc))
    if decoder.offset != stream_len:
        raise Finding(f"closed cleanly at offset {decoder.offset} of {stream_len}")
    return _Outcome(out, None)


def test_one_input(data: bytes) -> None:
    _LOGS.reset()
    head, stream = split_header(data)
    limit = _LIMITS[head.knob % len(_LIMITS)]
    n = len(stream)
    reference = _decode(frame_pieces(stream, limit), head.release, limit, n)
    chunkings = {"one feed": [stream], "chunked": _chunks(stream, head.a, head.b)}
    for name, pieces in chunkings.items():
        got = _decode(pieces, head.release, limit, n)
        if got.error != reference.error:
            raise Finding(
                f"{name}: error {got.error!r}, but one frame per feed gives {reference.error!r}"
            )
        if got.envelopes == reference.envelopes:
            continue
        # The sources' contract (transport.PipeSource): "a malformed stream is
        # reported after the envelopes decoded before it".
        lost = reference.envelopes[len(got.envelopes) :]
        if got.error and got.envelopes + lost == reference.envelopes and known.tolerate("F1"):
            continue
        raise Finding(
            f"{name}: {len(got.envelopes)} envelopes, one frame per feed"
            f" {len(reference.envelopes)} (error: {got.error})"
        )
    _LOGS.take()
