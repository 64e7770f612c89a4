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
import contextlib
import errno
import logging
import os
import stat
import threading
from typing import BinaryIO, Protocol

import trio

from dataplane.errors import ProtocolError
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.decode import EnvelopeDecoder
from dataplane.wire.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, encode_frame
from dataplane.wire.releases import ContradictionError, FormatError, parse_release

__all__ = [
    "FileSource",
    "MessageSink",
    "MessageSource",
    "PipeSink",
    "PipeSource",
    "QueueSource",
    "check_pipe_fd",
]

log = logging.getLogger(__name__)

_CHUNK = 1 << 20
# Undelivered input the pipe reader holds before it stops reading (and the
# writer meets the pipe's back-pressure): a full 10,000-endpoint snapshot is
# well under this.
DEFAULT_MAX_QUEUED_BYTES = 256 << 20
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

    def __init__(self, max_frame_bytes: int, record_to: BinaryIO | None, release: str) -> None:
        self.decoder = FrameDecoder(max_frame_bytes, parse_release(release))
        self._record_to = record_to
        self._eof = False

    def _take(self, data: bytes) -> list[pb.ToDataplane]:
        if self._record_to is not None:
            self._record_to.write(data)
            self._record_to.flush()
        if not data:
            self._eof = True
            self._end()
            return []
        return self.decoder.feed(data)

    def _end(self) -> None:
        """End of input: a frame left unfinished is an error (Felix died mid-write)."""
        self.decoder.close()


class PipeSource(_ByteSource):
    """Reads frames from a pipe fd (Felix's fd 3) on a thread of its own.

    Why a thread: Felix's writes must never wait for our kernel writes. A
    pipe holds 64 KiB; read only between applies, it fills during a long
    apply and the writer blocks for as long as the apply takes. The reader
    thread reads and decodes whatever arrives, whatever phase 2 is doing
    (even a stretch of pure-Python rendering, since the GIL is handed over
    every few milliseconds), and queues the envelopes for phase 1.

    The queue is bounded by memory, not by the pipe: past
    ``max_queued_bytes`` of undelivered frames the thread stops reading, so
    a writer far ahead of us meets the pipe's back-pressure again instead
    of our memory growing without end. A malformed stream is reported
    after the envelopes decoded before it, as with every byte source.
    """

    def __init__(
        self,
        fd: int,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        record_to: BinaryIO | None = None,
        max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
        release: str = "auto",
    ) -> None:
        super().__init__(max_frame_bytes, record_to, release)
        self.fd = fd
        self.max_queued_bytes = max_queued_bytes
        os.set_blocking(fd, True)
        self._lock = threading.Condition()
        self._queue: collections.deque[tuple[list[pb.ToDataplane], int]] = collections.deque()
        self._queued_bytes = 0
        self._ended = False  # the thread has seen end of input (or an error)
        self._error: ProtocolError | None = None
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._wakeup = trio.Event()
        self.peak_queued_bytes = 0
        self.backpressure = threading.Event()  # set once the bound has stopped the reader

    def _start(self) -> None:
        if self._thread is None:
            self._token = trio.lowlevel.current_trio_token()
            self._thread = threading.Thread(target=self._run, name="pipe-reader", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._queued_bytes > self.max_queued_bytes:
                    self.backpressure.set()
                    self._lock.wait()
            try:
                data = os.read(self.fd, _CHUNK)
            except OSError as exc:  # fd closed under us: treat as end of input
                log.warning("reading the input pipe failed: %s; treating it as end of input", exc)
                data = b""
            try:
                batch = self._take(data)
            except ProtocolError as exc:
                with self._lock:
                    self._error = exc
                    self._ended = True
                self._notify()
                return
            with self._lock:
                if batch:
                    self._queue.append((batch, len(data)))
                    self._queued_bytes += len(data)
                    self.peak_queued_bytes = max(self.peak_queued_bytes, self._queued_bytes)
                if not data:
                    self._ended = True
                if self.decoder.error is not None:  # a bad frame after this batch
                    self._error = self.decoder.error
                    self._ended = True
            self._notify()
            if self._ended:
                return

    def _notify(self) -> None:
        assert self._token is not None
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._wake)

    def _wake(self) -> None:
        # In trio's thread, so it sets the event receive_batch waits on now.
        self._wakeup.set()

    async def receive_batch(self) -> list[pb.ToDataplane]:
        self._start()
        while True:
            batch = self.poll()
            if batch:
                return batch
            with self._lock:
                if self._queue:
                    continue
                if self._ended:
                    break
                self._wakeup = trio.Event()
            await self._wakeup.wait()
        if self._error is not None:
            raise self._error
        return []

    def poll(self) -> list[pb.ToDataplane]:
        self._start()
        out: list[pb.ToDataplane] = []
        with self._lock:
            taken = 0
            while self._queue and taken < _POLL_BUDGET:
                batch, size = self._queue.popleft()
                out.extend(batch)
                taken += size
            self._queued_bytes -= taken
            self._lock.notify_all()
            if not out and self._ended and self._error is not None:
                raise self._error
        return out


class FileSource(_ByteSource):
    """Reads frames from a recorded log (or any readable binary file).

    A log that ends inside a frame (copied while being written) is read up
    to its last complete frame, with one warning naming the byte offset.

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
        release: str = "auto",
    ) -> None:
        super().__init__(max_frame_bytes, record_to, release)
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

    def _end(self) -> None:
        # A --record file copied from a running node may end inside the frame
        # being written: every complete frame before it is still the log.
        left = self.decoder.pending_bytes
        if left and self.decoder.error is None:
            log.warning(
                "the log ends inside a frame at byte %d (%d byte(s) of it):"
                " every complete frame before it is used",
                self.decoder.offset,
                left,
            )
            return
        self.decoder.close()


class QueueSource:
    """In-process source behind the embedding API's ``send_message``.

    Objects get the same release handling as bytes: an embedder that sends
    v3.32's split host messages gets v3.32's meaning.
    """

    def __init__(self) -> None:
        self._queue: collections.deque[pb.ToDataplane] = collections.deque()
        self._wakeup = trio.Event()
        self._closed = False
        self._envelopes = EnvelopeDecoder()
        self._count = 0
        self._last_seq: int | None = None

    def put(self, envelope: pb.ToDataplane) -> None:
        """Queue one envelope.

        One that contradicts a Felix release the stream has already settled
        is refused alone, with one log line.

        Raises:
            ProtocolError: it contradicts the Felix release seen so far,
                before the stream settled it.
        """
        if self._closed:
            raise RuntimeError("the dataplane's input is closed")
        try:
            accepted = self._envelopes.accept(envelope)
        except ContradictionError as exc:
            log.warning("%s; message refused", exc)
            return
        except FormatError as exc:
            raise ProtocolError(
                str(exc), offset=0, frame_index=self._count, last_good_seq=self._last_seq
            ) from None
        self._count += 1
        self._last_seq = envelope.sequence_number
        if accepted is not None:
            self._queue.append(accepted)
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
