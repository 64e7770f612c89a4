"""The pipe reader runs independently of phase 2, bounded by memory.

A writer thread plays Felix on a real pipe. Nothing here sleeps: waits are
on events with deadlines.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from collections.abc import Iterator

import pytest
import trio

from dataplane.errors import ProtocolError
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import encode_frame
from dataplane.wire.msgs import to_dataplane
from dataplane.wire.transport import PipeSource
from tests.conftest import workload

DEADLINE = 30.0


def burst(n: int) -> bytes:
    return b"".join(
        encode_frame(to_dataplane(workload(f"ns/pod-{i}", f"cali{i:011d}", "10.0.0.1/32"), i + 1))
        for i in range(n)
    )


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


def write_all(fd: int, data: bytes, done: threading.Event) -> threading.Thread:
    def run() -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view[: 1 << 16]) :]
        os.close(fd)
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_the_writer_finishes_while_the_loop_is_busy_elsewhere(pipe: tuple[int, int]) -> None:
    # 5,000 endpoint updates (~390 KB, 6 pipe-fulls) are written while the
    # loop takes nothing: only a reader of its own lets the writer finish.
    r, w = pipe
    data = burst(5000)
    assert len(data) > 5 * 65536
    source = PipeSource(r)
    done = threading.Event()

    async def main() -> None:
        source.poll()  # starts the reader; the pipe is empty yet
        write_all(w, data, done)
        # "Phase 2": the loop is busy and does not read; the writer must
        # still finish.
        assert await trio.to_thread.run_sync(done.wait, DEADLINE)
        got = [e.sequence_number for e in await source.receive_batch()]
        while more := await source.receive_batch():
            got += [e.sequence_number for e in more]
        assert got == list(range(1, 5001))

    trio.run(main)


def test_the_queue_is_bounded_by_memory(pipe: tuple[int, int]) -> None:
    r, w = pipe
    data = burst(3000)
    source = PipeSource(r, max_queued_bytes=100_000)
    done = threading.Event()

    async def main() -> None:
        source.poll()
        write_all(w, data, done)
        # With nothing taken the reader stops at the bound, and the writer
        # (far more to write than the bound and the pipe hold) waits.
        assert await trio.to_thread.run_sync(source.backpressure.wait, DEADLINE)
        assert not done.is_set()
        got = 0
        while batch := await source.receive_batch():
            got += len(batch)
        assert got == 3000 and done.is_set()

    trio.run(main)
    # What was held never passed the bound by more than one read (a pipe-full).
    assert 100_000 < source.peak_queued_bytes <= 100_000 + 65536


def test_a_malformed_stream_fails_after_the_good_frames(pipe: tuple[int, int]) -> None:
    r, w = pipe
    bad_length = struct.pack("<Q", 1 << 40)
    data = burst(3) + bad_length
    source = PipeSource(r)
    done = threading.Event()

    async def main() -> None:
        source.poll()
        write_all(w, data, done)
        assert await trio.to_thread.run_sync(done.wait, DEADLINE)
        got: list[pb.ToDataplane] = []
        with pytest.raises(ProtocolError, match="byte offset"):
            while batch := await source.receive_batch():
                got += batch
        assert len(got) <= 3

    trio.run(main)
