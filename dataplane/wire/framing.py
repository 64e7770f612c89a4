"""Frames <-> envelopes: the byte format shared by the pipe and by log files.

A frame is an 8-byte little-endian unsigned length followed by that many
bytes of one serialized envelope (``ToDataplane`` towards the driver,
``FromDataplane`` back). A recorded log is the same byte stream, frames back
to back, so ``tee`` of a live pipe is a valid log.

The decoder is incremental and pure (bytes in, envelopes out). It keeps the
stream position so that any failure can name the byte offset of the bad
frame, its index and the last sequence number decoded before it: the
operator's first three questions when a stream breaks.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable

from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from dataplane.errors import ProtocolError
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.decode import EnvelopeDecoder
from dataplane.wire.pbwire import WireError
from dataplane.wire.releases import ContradictionError, FormatError, Release

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "FrameDecoder", "encode_frame", "encode_frames"]

log = logging.getLogger(__name__)

DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
_HEADER = struct.Struct("<Q")


def _misfit_field(message: Message) -> int | None:
    """Number of a field the schema knows but that arrived undecodable.

    The parser files a known field number with the wrong wire type among the
    unknown fields; that only happens when the sender encoded some other
    message (typically a ``FromDataplane`` written to the wrong pipe).
    """
    unknown = UnknownFieldSet(message)
    if not len(unknown):
        return None
    known = message.DESCRIPTOR.fields_by_number
    for i in range(len(unknown)):
        if unknown[i].field_number in known:
            return int(unknown[i].field_number)
    return None


def encode_frame(envelope: Message) -> bytes:
    """Serialize one envelope into one frame.

    Deterministic serialization (sorted map keys) makes a log built twice
    from the same messages byte-identical, which golden tests rely on.
    """
    body = envelope.SerializeToString(deterministic=True)
    return _HEADER.pack(len(body)) + body


def encode_frames(envelopes: Iterable[Message]) -> bytes:
    """Serialize envelopes into a contiguous stream (a log file's contents)."""
    return b"".join(encode_frame(e) for e in envelopes)


class FrameDecoder:
    """Incremental decoder of a ``ToDataplane`` frame stream.

    Feed it bytes as they arrive; it returns every complete envelope and keeps
    any partial frame for the next call. Call :meth:`close` at end of input:
    a partial frame left over then is a truncated stream.

    Envelopes whose payload is a type this schema does not know (a newer
    Felix) are skipped with a warning rather than killing the driver; an
    envelope that is not a ``ToDataplane`` at all is a :class:`ProtocolError`.
    Envelopes from older Felix releases come out in today's form (see
    :mod:`dataplane.wire.decode`); ``release`` forces one release's format
    instead of detecting it.
    """

    def __init__(
        self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, release: Release | None = None
    ) -> None:
        if max_frame_bytes <= 0:
            raise ValueError("max_frame_bytes must be positive")
        self.max_frame_bytes = max_frame_bytes
        self.envelopes = EnvelopeDecoder(release)
        self._buf = bytearray()
        self._buf_offset = 0  # stream offset of _buf[0]
        self.frame_index = 0  # index of the next frame to decode
        self.last_good_seq: int | None = None
        self.skipped_unknown = 0
        self.refused = 0  # messages that contradicted the settled Felix format
        self.error: ProtocolError | None = None  # the stream broke here; it stays broken

    @property
    def offset(self) -> int:
        """Stream offset of the first byte not yet consumed as a frame."""
        return self._buf_offset

    @property
    def pending_bytes(self) -> int:
        return len(self._buf)

    def _error(self, reason: str, pos: int = 0) -> ProtocolError:
        """An error about the frame starting ``pos`` bytes into the buffer."""
        return ProtocolError(
            reason,
            offset=self._buf_offset + pos,
            frame_index=self.frame_index,
            last_good_seq=self.last_good_seq,
        )

    def feed(self, data: bytes | bytearray | memoryview) -> list[pb.ToDataplane]:
        """Add ``data`` to the stream; return the envelopes it completed.

        A bad frame raises :class:`ProtocolError`; if ``data`` completed good
        envelopes before it, they are returned first, :attr:`error` is set,
        and the next call (``feed`` or ``close``) raises it.
        """
        if self.error is not None:
            raise self.error
        buf = self._buf
        buf += data
        out: list[pb.ToDataplane] = []
        pos = 0
        end = len(buf)
        view = memoryview(buf)
        try:
            while end - pos >= 8:
                (length,) = _HEADER.unpack_from(buf, pos)
                if length > self.max_frame_bytes:
                    raise self._error(
                        f"frame length {length} exceeds the limit of {self.max_frame_bytes} bytes",
                        pos,
                    )
                if end - pos - 8 < length:
                    break
                envelope = self._decode(view[pos + 8 : pos + 8 + length], pos)
                pos += 8 + length
                self.frame_index += 1
                if envelope is not None:
                    self.last_good_seq = envelope.sequence_number
                    out.append(envelope)
        except ProtocolError as exc:
            self.error = exc
            if not out:
                raise
            # Hand out what came before the bad frame. The error's traceback
            # may still hold a view of the buffer: copy the rest, not resize.
            self._buf = buf[pos:]
            self._buf_offset += pos
            return out
        finally:
            view.release()
        self._consume(pos)
        return out

    def _consume(self, nbytes: int) -> None:
        if nbytes:
            del self._buf[:nbytes]
            self._buf_offset += nbytes

    def _decode(self, body: memoryview, pos: int) -> pb.ToDataplane | None:
        try:
            envelope = self.envelopes.decode(body)
        except (DecodeError, WireError) as exc:
            reason = f"undecodable envelope ({exc or 'protobuf parse failed'})"
            raise self._error(reason, pos) from None
        except ContradictionError as exc:
            self._refuse(str(exc))  # only the text: the traceback holds a view of the buffer
            return None
        except FormatError as exc:
            raise self._error(str(exc), pos) from None
        kind = envelope.WhichOneof("payload")
        if kind is not None and not envelope.sequence_number:
            # A FromDataplane whose sequence number is zero has no top-level
            # tell (any other carries field 8 as a varint, caught below),
            # but its payload does not fit the ToDataplane one it lands in.
            number = _misfit_field(getattr(envelope, kind))
            if number is not None:
                raise self._error(
                    f"not a ToDataplane envelope: {kind} field {number} does not have"
                    " the type the schema gives it",
                    pos,
                )
        unknown = UnknownFieldSet(envelope)
        if not len(unknown):  # the common case: a well-formed envelope
            if kind is None:
                raise self._error("envelope carries no payload", pos)
            return self._accept(envelope, pos)
        number = _misfit_field(envelope)
        if number is not None:
            raise self._error(
                f"not a ToDataplane envelope: field {number} does not have the type"
                " ToDataplane gives it",
                pos,
            )
        if kind is not None:
            return self._accept(envelope, pos)  # unknown extra fields beside a known payload
        numbers = sorted({unknown[i].field_number for i in range(len(unknown))})
        log.warning(
            "frame %d (seq %d): skipping payload of unknown type (field %s);"
            " is Felix newer than this driver?",
            self.frame_index,
            envelope.sequence_number,
            ",".join(map(str, numbers)),
        )
        self.skipped_unknown += 1
        self.last_good_seq = envelope.sequence_number
        return None

    def _accept(self, envelope: pb.ToDataplane, pos: int) -> pb.ToDataplane | None:
        try:
            accepted = self.envelopes.accept(envelope)
        except ContradictionError as exc:
            self._refuse(str(exc))  # only the text: the traceback holds a view of the buffer
            return None
        except FormatError as exc:
            raise self._error(str(exc), pos) from None
        if accepted is None:  # consumed: nothing to hand on
            self.last_good_seq = envelope.sequence_number
        return accepted

    def _refuse(self, reason: str) -> None:
        """Drop one message that contradicts the settled format; the stream goes on."""
        log.warning("frame %d: %s; message refused", self.frame_index, reason)
        self.refused += 1

    def close(self) -> None:
        """Declare end of input; raise if a partial frame is left over."""
        if self.error is not None:
            raise self.error
        if not self._buf:
            return
        if len(self._buf) < 8:
            raise self._error(f"truncated frame: {len(self._buf)} byte(s) of an 8-byte length")
        (length,) = _HEADER.unpack_from(self._buf, 0)
        raise self._error(
            f"truncated frame: {len(self._buf) - 8} of {length} body bytes before end of input"
        )
