"""Felix's dataplane driver with a clock on its pipes: the real-Felix benchmark's probe.

Felix starts this as its ``DataplaneDriver`` (fds 3 and 4, its own
environment). It starts the real ``dataplane-driver`` (or
``DATAPLANE_BENCH_DRIVER``) with pipes of its own as fds 3 and 4 and copies
both directions, one thread each. Every frame is timestamped with
``time.monotonic()`` (CLOCK_MONOTONIC: one clock for every namespace and
process on the machine) as soon as the read that completes it returns, and
written to the file ``DATAPLANE_BENCH_RELAY_LOG`` names, one line each::

    T in KIND [WORKLOAD_ID]       a ToDataplane from Felix
    T out KIND [WORKLOAD_ID]      a FromDataplane from the driver

``KIND`` is the envelope's payload; ``WORKLOAD_ID`` ("namespace/pod") is
given for endpoint updates, removes and statuses. Bytes from Felix are
passed on as read, before they are decoded (by the driver's own decoder:
each Felix release has its own wire): the probe costs the driver one pipe
hop and no more. The driver is told to send ``DataplaneInSync``
(``DATAPLANE_SEND_IN_SYNC=yes``), which marks the end of its first apply;
the relay logs it and does not pass it on, so Felix sees what it sees from
a driver on its defaults. Felix's SIGTERM and SIGINT are passed to the
driver, and the relay exits with the driver's code.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from google.protobuf.message import Message

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import FrameDecoder

HEADER = struct.Struct("<Q")
WITH_ID = frozenset(
    {
        "workload_endpoint_update",
        "workload_endpoint_remove",
        "workload_endpoint_status_update",
        "workload_endpoint_status_remove",
    }
)


def describe(envelope: Message) -> str:
    kind = str(envelope.WhichOneof("payload"))
    if kind in WITH_ID:
        return f"{kind} {getattr(envelope, kind).id.workload_id}"
    return kind


class Direction:
    """One pipe's copy: frames found, timestamped and logged."""

    def __init__(self, name: str, log: IO[str], lock: threading.Lock) -> None:
        self.name, self.log, self.lock = name, log, lock

    def logged(self, found: list[str], at: float) -> None:
        if found:
            with self.lock:
                self.log.write("".join(f"{at:.6f} {self.name} {what}\n" for what in found))
                self.log.flush()


class FromFelix(Direction):
    def __init__(self, log: IO[str], lock: threading.Lock) -> None:
        super().__init__("in", log, lock)
        self.decoder = FrameDecoder()
        self.broken = False

    def frames(self, chunk: bytes, at: float) -> None:
        """Log the frames completed by ``chunk``; a stream it cannot read is logged
        once and no longer decoded (the driver, which has the same bytes, says why)."""
        if self.broken:
            return
        try:
            found = [describe(e) for e in self.decoder.feed(chunk)]
        except Exception as exc:  # whatever it is, the copy must go on
            found = [f"undecodable {exc}".replace("\n", " ")]
            self.broken = True
        self.logged(found, at)


class FromDriver(Direction):
    def __init__(self, log: IO[str], lock: threading.Lock) -> None:
        super().__init__("out", log, lock)
        self.pending = bytearray()

    def frames(self, chunk: bytes, at: float) -> list[tuple[bytes, str]]:
        """Complete frames so far (raw, described), logged."""
        self.pending += chunk
        found: list[tuple[bytes, str]] = []
        while len(self.pending) >= HEADER.size:
            (length,) = HEADER.unpack_from(self.pending)
            end = HEADER.size + length
            if len(self.pending) < end:
                break
            envelope = pb.FromDataplane()
            envelope.ParseFromString(bytes(self.pending[HEADER.size : end]))
            found.append((bytes(self.pending[:end]), describe(envelope)))
            del self.pending[:end]
        self.logged([what for _, what in found], at)
        return found


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def copy_in(src: int, dst: int, direction: FromFelix) -> None:
    """Felix → driver: bytes passed on as read, decoded after."""
    try:
        while chunk := os.read(src, 1 << 20):
            at = time.monotonic()
            _write_all(dst, chunk)
            direction.frames(chunk, at)
    except BrokenPipeError:
        pass  # the driver is gone; its exit code says why
    finally:
        os.close(dst)


def copy_out(src: int, dst: int, direction: FromDriver) -> None:
    """Driver → Felix: whole frames, all but DataplaneInSync."""
    try:
        while chunk := os.read(src, 1 << 20):
            at = time.monotonic()
            for frame, what in direction.frames(chunk, at):
                if what != "dataplane_in_sync":
                    _write_all(dst, frame)
    except BrokenPipeError:
        pass  # Felix stopped reading: it is going away
    finally:
        os.close(dst)


def main() -> int:
    driver = os.environ.get("DATAPLANE_BENCH_DRIVER") or str(
        Path(sys.executable).with_name("dataplane-driver")
    )
    log = open(os.environ["DATAPLANE_BENCH_RELAY_LOG"], "a")  # noqa: SIM115 (for the threads)
    lock = threading.Lock()
    from_felix, to_felix = os.dup(3), os.dup(4)
    to_driver_r, to_driver_w = os.pipe()
    from_driver_r, from_driver_w = os.pipe()
    os.dup2(to_driver_r, 3)
    os.dup2(from_driver_w, 4)
    proc = subprocess.Popen(
        [driver, *sys.argv[1:]],
        pass_fds=(3, 4),
        env={**os.environ, "DATAPLANE_SEND_IN_SYNC": "yes"},
    )
    for fd in (3, 4, to_driver_r, from_driver_w):
        os.close(fd)
    with lock:
        log.write(f"{time.monotonic():.6f} pid {proc.pid}\n")
        log.flush()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda s, _f: proc.send_signal(s))
    threads = [
        threading.Thread(
            target=copy_in,
            args=(from_felix, to_driver_w, FromFelix(log, lock)),
            daemon=True,
        ),
        threading.Thread(
            target=copy_out,
            args=(from_driver_r, to_felix, FromDriver(log, lock)),
            daemon=True,
        ),
    ]
    for thread in threads:
        thread.start()
    code = proc.wait()
    threads[1].join(timeout=5)  # the driver's last frames reach Felix
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
