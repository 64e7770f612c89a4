"""Recorded message logs: build, write and read them.

A log is the byte stream Felix writes to the driver's fd 3 (frames back to
back), so ``driver.py --record`` output, ``tee`` of a live pipe, and the
files built here are interchangeable. Tests and examples build logs from
plain payload lists::

    write_log("node.log", [pb.ConfigUpdate(...), pb.IPSetUpdate(...), pb.InSync()])
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from google.protobuf.message import Message

from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, encode_frames
from dataplane.wire.msgs import to_dataplane

__all__ = ["build_log", "envelopes", "read_log", "write_log"]


def envelopes(messages: Iterable[Message], first_seq: int = 1) -> list[pb.ToDataplane]:
    """Wrap payloads (or re-number envelopes) with consecutive sequence numbers."""
    return [to_dataplane(m, seq) for seq, m in enumerate(messages, start=first_seq)]


def build_log(messages: Iterable[Message], first_seq: int = 1) -> bytes:
    """The bytes of a log holding ``messages`` in order."""
    return encode_frames(envelopes(messages, first_seq))


def write_log(path: str | Path, messages: Iterable[Message], first_seq: int = 1) -> None:
    Path(path).write_bytes(build_log(messages, first_seq))


def read_log(
    path: str | Path, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> list[pb.ToDataplane]:
    """Decode a whole log; raises ProtocolError if it is malformed."""
    decoder = FrameDecoder(max_frame_bytes)
    out = decoder.feed(Path(path).read_bytes())
    decoder.close()
    return out
