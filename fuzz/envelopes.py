"""Target ``envelopes``: mutated real envelopes through EnvelopeDecoder, via FrameDecoder.

Inputs are header + frame streams (layout in :mod:`fuzz.common`) grown from
real sessions (the demo log, each supported Felix release's session) by
:class:`~fuzz.structured.StructuredMutator`, so the frames stay whole and
the bodies mostly parse: what is exercised is ``EnvelopeDecoder.decode``
(sniffing, v3.30-v3.31 transcoding), ``accept`` (release evidence, host
metadata merging) and the detector. Checked, one frame per ``feed``:

* only :class:`~dataplane.errors.ProtocolError` escapes (the decoder
  translates ``DecodeError``, ``WireError`` and ``FormatError``): one line
  naming the offset, index and last good seq, and those are exactly the
  offset and index of the frame just fed and the last good seq before it;
* every envelope handed out has a payload and is in master's form: none of
  v3.30-v3.32's split host messages (35-38) gets through;
* the release detector never runs out of candidates, only narrows, stays
  on a forced release; whatever is logged is one line;
* the same stream in one ``feed`` fails with the same text, or hands out
  the same envelopes.
"""

from __future__ import annotations

from dataplane.errors import ProtocolError
from dataplane.wire.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder
from dataplane.wire.legacy_hosts import LEGACY_HOST_PAYLOADS
from dataplane.wire.releases import Release
from fuzz.common import (
    Finding,
    LogCapture,
    check_detector,
    check_protocol_error,
    frame_pieces,
    split_header,
)

__all__ = ["test_one_input"]

_SPLIT_HOSTS = LEGACY_HOST_PAYLOADS - {"host_metadata_update", "host_metadata_remove"}
_LOGS = LogCapture.install()


def _one_feed(stream: bytes, release: Release | None) -> tuple[list[bytes], str | None]:
    decoder = FrameDecoder(release=release)
    try:
        out = decoder.feed(stream)
        decoder.close()
    except ProtocolError as exc:
        return [], str(exc)
    return [e.SerializeToString(deterministic=True) for e in out], None


def test_one_input(data: bytes) -> None:
    _LOGS.reset()
    head, stream = split_header(data)
    decoder = FrameDecoder(release=head.release)
    candidates = check_detector(decoder, frozenset(Release))
    out: list[bytes] = []
    error: str | None = None
    offset = 0  # where the frame being fed starts
    expect: tuple[int, int, int | None] = (0, 0, None)  # what an error must name
    try:
        for index, piece in enumerate(frame_pieces(stream, DEFAULT_MAX_FRAME_BYTES)):
            expect = (offset, index, decoder.last_good_seq)
            for envelope in decoder.feed(piece):
                kind = envelope.WhichOneof("payload")
                if kind is None or kind in _SPLIT_HOSTS:
                    raise Finding(f"frame {index}: handed out an envelope with payload {kind}")
                out.append(envelope.SerializeToString(deterministic=True))
            candidates = check_detector(decoder, candidates)
            if not decoder.pending_bytes:  # a whole frame (else the partial last piece)
                offset += len(piece)
        decoder.close()
    except ProtocolError as exc:
        check_protocol_error(exc, len(stream))
        where = (exc.offset, exc.frame_index, exc.last_good_seq)
        if where != expect:
            raise Finding(
                f"error names (offset, frame, last good seq) {where}, but the frame fed"
                f" was {expect}: {exc}"
            ) from None
        error = str(exc)
    _LOGS.take()
    whole, whole_error = _one_feed(stream, head.release)
    _LOGS.take()
    if whole_error != error:
        raise Finding(f"one feed: error {whole_error!r}, frame by frame {error!r}")
    if error is None and whole != out:
        raise Finding("one feed hands out other envelopes than frame by frame")
