"""What every harness shares: the input header, findings, one-line checks, log capture.

Every target reads the same input layout, so that one target's corpus is a
valid (if not ideal) corpus for another::

    byte 0      Felix release: 0 auto, 1-4 forced v3.30..v3.33 (modulo 5)
    byte 1      a per-target knob (frames: the frame size limit; managers: batch size)
    bytes 2, 3  per-target knobs (frames: the chunking; managers: where InSync goes)
    the rest    a frame stream, exactly as on Felix's pipe (8-byte LE length, body)

An input shorter than the header is padded with zero bytes.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

from dataplane.errors import ProtocolError
from dataplane.wire.framing import FrameDecoder
from dataplane.wire.releases import Release

__all__ = [
    "HEADER_BYTES",
    "RELEASES",
    "Finding",
    "Header",
    "LogCapture",
    "check_detector",
    "check_one_line",
    "check_protocol_error",
    "frame_pieces",
    "header_bytes",
    "split_header",
]

HEADER_BYTES = 4
RELEASES: tuple[Release | None, ...] = (None, *Release)
_LENGTH = struct.Struct("<Q")


class Finding(Exception):  # noqa: N818 - what a fuzzer finds, not an error of ours
    """An invariant a target checks does not hold: a bug, or a wrong invariant."""


@dataclass(frozen=True, slots=True)
class Header:
    release: Release | None
    knob: int
    a: int
    b: int


def split_header(data: bytes) -> tuple[Header, bytes]:
    head = data[:HEADER_BYTES].ljust(HEADER_BYTES, b"\0")
    release = RELEASES[head[0] % len(RELEASES)]
    return Header(release, head[1], head[2], head[3]), data[HEADER_BYTES:]


def header_bytes(release: Release | None = None, knob: int = 0, a: int = 0, b: int = 0) -> bytes:
    """The header that :func:`split_header` reads back as these values."""
    return bytes([RELEASES.index(release), knob, a, b])


def frame_pieces(stream: bytes, max_frame_bytes: int) -> list[bytes]:
    """``stream`` cut at its frame boundaries, as the length prefixes say.

    Each piece is one whole frame; what follows the last whole frame (a
    partial frame, or everything from a length over ``max_frame_bytes`` on)
    is the last piece. Fed one piece per call, a decoder completes at most
    one frame per call, so an error loses no envelope decoded before it.
    """
    pieces: list[bytes] = []
    pos = 0
    end = len(stream)
    while end - pos >= _LENGTH.size:
        (length,) = _LENGTH.unpack_from(stream, pos)
        if length > max_frame_bytes or end - pos - _LENGTH.size < length:
            break
        pieces.append(stream[pos : pos + _LENGTH.size + length])
        pos += _LENGTH.size + length
    if pos < end:
        pieces.append(stream[pos:])
    return pieces


def check_one_line(text: str, what: str) -> None:
    if "\n" in text or "\r" in text:
        raise Finding(f"{what} is not one line: {text!r}")


def check_protocol_error(exc: ProtocolError, stream_len: int) -> None:
    """A stream error is one line naming byte offset, frame index and last good seq."""
    text = str(exc)
    check_one_line(text, "ProtocolError")
    last = "none" if exc.last_good_seq is None else str(exc.last_good_seq)
    parts = (f"byte offset {exc.offset} ", f"(frame {exc.frame_index},", f"last good seq {last})")
    for part in parts:
        if part not in text:
            raise Finding(f"ProtocolError does not say {part.strip()!r}: {text!r}")
    if not 0 <= exc.offset <= stream_len:
        raise Finding(f"ProtocolError offset {exc.offset} outside a {stream_len}-byte stream")
    if exc.frame_index < 0:
        raise Finding(f"ProtocolError frame index {exc.frame_index}")


def _names(releases: frozenset[Release]) -> str:
    return ",".join(sorted(r.value for r in releases))


def check_detector(decoder: FrameDecoder, before: frozenset[Release]) -> frozenset[Release]:
    """The release detector's invariants: candidates never empty, only shrink.

    Returns the candidates now, for the next call's ``before``.
    """
    detector = decoder.envelopes.detector
    now = detector.candidates
    if not now:
        raise Finding("the release detector has no candidate left")
    if not now <= before:
        raise Finding(f"release candidates grew from {_names(before)} to {_names(now)}")
    if detector.forced is not None and now != {detector.forced}:
        raise Finding(f"forced {detector.forced.value} but candidates are {_names(now)}")
    return now


class LogCapture(logging.Handler):
    """Keeps what ``dataplane.*`` logs (INFO and up) instead of printing it."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @classmethod
    def install(cls) -> LogCapture:
        """The one capture for ``dataplane.*`` (shared by every harness in a process)."""
        logger = logging.getLogger("dataplane")
        for handler in logger.handlers:
            if isinstance(handler, cls):
                return handler
        capture = cls()
        logger.handlers[:] = [capture]
        logger.setLevel(logging.INFO)
        logger.propagate = False
        return capture

    def reset(self) -> None:
        """Forget what an earlier input left (one that raised before taking its records)."""
        self.records = []

    def take(self) -> list[logging.LogRecord]:
        """The records since the last call; each must be one line."""
        records, self.records = self.records, []
        for record in records:
            check_one_line(record.getMessage(), f"log line from {record.name}")
        return records
