"""Message sources and sinks: pipes (Felix mode), log files, in-process.

A source hands the loop batches of decoded ``ToDataplane`` envelopes:

* ``await receive_batch()`` blocks until at least one envelope is decoded
  and returns every one available *now*; an empty list means end of input.
* ``poll()`` never blocks: it returns what is available now, maybe nothing.

The loop uses the pair to drain everything already waiting before it runs
phase 2, which is what turns a burst of messages into a single apply.

Byte sources (pipe, file) share one decoder, so a malformed stream fails the
same way whichever way it arrived, and can tee every byte they read to a
recording (``--record``) so that a live session becomes a replayable log.
"""

from __future__ import annotations

import collections
import errno
import os
import stat
from typing import BinaryIO, Protocol

import trio

from dataplane._pb import felixbackend_pb2 as pb
from dataplane.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, encode_frame

__all__ = [
    "FileSource",
    "MessageSink",
    "MessageSource",
    "PipeSink",
    "PipeSource",
    "QueueSource",
    "check_pipe_fd",
]

_CHUNK = 1 << 20
# Upper bound on bytes one poll takes from a pipe, so a fast writer cannot
# keep phase 1 going forever and starve applies.
_POLL_BUDGET = 16 << 20


class MessageSource(Protocol):
    async def receive_batch(self) -> list[pb.ToDataplane]: ...

    def poll(self) -> list[pb.ToDataplane]: ...


class MessageSink(Protocol):
    async def send(self, envelope: pb.FromDataplane) -> None: ...


class _ByteSource:
    """Common decoding and recording for sources that read bytes."""

    def __init__(self, max_frame_bytes: int, record_to: BinaryIO | None) -> None:
        self.decoder = FrameDecoder(max_frame_bytes)
        self._record_to = record_to
        self._eof = False

    def _take(self, data: bytes) -> list[pb.ToDataplane]:
        if self._record_to is not None:
            self._record_to.write(data)
            self._record_to.flush()
        if not data:
            self._eof = True
            self.decoder.close()
            return []
        return self.decoder.feed(data)


class PipeSource(_ByteSource):
    """Reads frames from a pipe fd (Felix's fd 3) without blocking the loop."""

    def __init__(
        self,
        fd: int,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        record_to: BinaryIO | None = None,
    ) -> None:
        super().__init__(max_frame_bytes, record_to)
        self.fd = fd
        os.set_blocking(fd, False)

    def _read(self) -> bytes | None:
        try:
            return os.read(self.fd, _CHUNK)
        except BlockingIOError:
            return None

    async def receive_batch(self) -> list[pb.ToDataplane]:
        while not self._eof:
            batch = self.poll()
            if batch or self._eof:
                return batch
            await trio.lowlevel.wait_readable(self.fd)
        return []

    def poll(self) -> list[pb.ToDataplane]:
        out: list[pb.ToDataplane] = []
        taken = 0
        while not self._eof and taken < _POLL_BUDGET:
            data = self._read()
            if data is None:
                break
            taken += len(data)
            out.extend(self._take(data))
        return out


class FileSource(_ByteSource):
    """Reads frames from a recorded log (or any readable binary file).

    A file is always "ready", so everything up to end of file counts as
    already waiting: a replayed log is one burst, as it would be if Felix
    had sent it all before the driver looked.
    """

    def __init__(
        self,
        file: BinaryIO,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        record_to: BinaryIO | None = None,
    ) -> None:
        super().__init__(max_frame_bytes, record_to)
        self._file = file

    async def receive_batch(self) -> list[pb.ToDataplane]:
        await trio.lowlevel.checkpoint()
        while not self._eof:
            batch = self.poll()
            if batch:
                return batch
        return []

    def poll(self) -> list[pb.ToDataplane]:
        if self._eof:
            return []
        return self._take(self._file.read(_CHUNK))


class QueueSource:
    """In-process source behind the embedding API's ``send_message``."""

    def __init__(self) -> None:
        self._queue: collections.deque[pb.ToDataplane] = collections.deque()
        self._wakeup = trio.Event()
        self._closed = False

    def put(self, envelope: pb.ToDataplane) -> None:
        if self._closed:
            raise RuntimeError("the dataplane's input is closed")
        self._queue.append(envelope)
        self._wakeup.set()

    def close(self) -> None:
        """End of input: the loop finishes what it has and stops."""
        self._closed = True
        self._wakeup.set()

    async def receive_batch(self) -> list[pb.ToDataplane]:
        while not self._queue and not self._closed:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
        await trio.lowlevel.checkpoint()
        return self.poll()

    def poll(self) -> list[pb.ToDataplane]:
        batch = list(self._queue)
        self._queue.clear()
        return batch


class PipeSink:
    """Writes ``FromDataplane`` frames to a pipe fd (Felix's fd 4)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)

    async def send(self, envelope: pb.FromDataplane) -> None:
        data = memoryview(encode_frame(envelope))
        while data:
            try:
                written = os.write(self.fd, data)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.fd)
                continue
            data = data[written:]
        await trio.lowlevel.checkpoint()


def check_pipe_fd(fd: int, role: str) -> None:
    """Raise OSError with an operator-friendly message unless fd is a pipe.

    Felix hands the driver os.Pipe() ends; a socket pair works too.
    """
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        raise OSError(errno.EBADF, f"fd {fd} ({role}) is not open") from None
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        raise OSError(errno.EINVAL, f"fd {fd} ({role}) is open but is not a pipe or socket")
