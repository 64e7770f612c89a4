"""Start driver.py the way Felix does: pipes on fds 3 (to it) and 4 (from it)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from google.protobuf.message import Message

from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import encode_frame
from dataplane.wire.msgs import to_dataplane

REPO = Path(__file__).resolve().parent.parent


def _next_envelope(buf: bytes) -> tuple[pb.FromDataplane | None, bytes]:
    """The first whole frame of ``buf``, decoded, and the bytes after it."""
    if len(buf) < 8:
        return None, buf
    (length,) = struct.unpack_from("<Q", buf)
    if len(buf) < 8 + length:
        return None, buf
    return pb.FromDataplane.FromString(buf[8 : 8 + length]), buf[8 + length :]


class FelixHarness:
    """Plays Felix's side of the external-driver pipes."""

    def __init__(
        self,
        *args: str,
        netns: str | None = None,
        env: dict[str, str] | None = None,
        wrapper: Sequence[str] = (),
        program: Sequence[str] | None = None,
        cwd: Path = REPO,
        own_status_dir: bool = True,
        send_in_sync: bool = True,
    ) -> None:
        """Start ``driver.py ARGS``; inside network namespace ``netns`` if given.

        ``env`` replaces the driver's environment (e.g. a PATH whose tools
        misbehave on purpose); ``wrapper`` runs before the interpreter
        (e.g. ``setpriv`` dropping a capability); ``program`` replaces
        ``python driver.py`` (e.g. the ``dataplane-driver`` console script),
        started in ``cwd``. Unless ``own_status_dir`` is False (the test then
        sets ``EndpointStatusPathPrefix`` itself), endpoint-status files go
        to a directory of the harness's own, :attr:`status_prefix`. Unless
        ``send_in_sync`` is False the driver is asked to send DataplaneInSync
        (``--send-in-sync yes``), which the harness's callers wait on.
        """
        to_driver_r, self.to_driver = os.pipe()
        self.from_driver, from_driver_w = os.pipe()
        # Park the child's ends above 10 so dup2 onto 3/4 cannot clobber them.
        child_r = fcntl.fcntl(to_driver_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_w = fcntl.fcntl(from_driver_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_driver_r)
        os.close(from_driver_w)

        def wire_fds() -> None:
            os.dup2(child_r, 3)
            os.dup2(child_w, 4)

        # Under Felix the driver writes endpoint-status files (Felix's
        # EndpointStatusPathPrefix, /var/run/calico by default): never the
        # host's for a test, a directory of this harness's own instead.
        self._status_dir = tempfile.TemporaryDirectory(prefix="felix-status-")
        self.status_prefix = Path(self._status_dir.name)
        env = dict(os.environ if env is None else env)
        if own_status_dir:
            env.setdefault("DATAPLANE_ENDPOINT_STATUS_PREFIX", str(self.status_prefix))
        # Never the host's /var/lib/calico/mtu: the harness's directory.
        self.mtu_file = self.status_prefix / "mtu"
        env.setdefault("DATAPLANE_MTU_FILE", str(self.mtu_file))
        # A parent of our own that reads DataplaneInSync (Felix drops it, so
        # the driver sends it only when asked); tests wait on it.
        if send_in_sync:
            env.setdefault("DATAPLANE_SEND_IN_SYNC", "yes")
        prefix = ["ip", "netns", "exec", netns] if netns else []
        driver = program or [sys.executable, str(REPO / "driver.py")]
        self.proc = subprocess.Popen(
            [*prefix, *wrapper, *driver, *args],
            preexec_fn=wire_fds,  # noqa: PLW1509 - single-threaded test process
            pass_fds=(3, 4),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
        )
        os.close(child_r)
        os.close(child_w)
        self._seq = 0
        self._buf = b""
        self._drainers: list[threading.Thread] = []
        self._drained_stderr: list[bytes] = []
        # Filled by watch(): (arrival time, envelope), under _arrived.
        self.received: list[tuple[float, pb.FromDataplane]] = []
        self._arrived = threading.Condition()

    def send(self, *payloads: Message) -> None:
        for payload in payloads:
            self._seq += 1
            self.send_raw(encode_frame(to_dataplane(payload, self._seq)))

    def send_raw(self, data: bytes) -> None:
        os.write(self.to_driver, data)

    def recv(self, timeout: float = 20.0) -> pb.FromDataplane:
        """Next envelope from the driver, waiting at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            envelope, self._buf = _next_envelope(self._buf)
            if envelope is not None:
                return envelope
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no message from the driver")
            ready, _, _ = select.select([self.from_driver], [], [], remaining)
            if ready:
                chunk = os.read(self.from_driver, 65536)
                if not chunk:
                    raise EOFError("driver closed fd 4")
                self._buf += chunk

    def recv_until(self, kind: str, timeout: float = 20.0) -> list[pb.FromDataplane]:
        """Envelopes up to and including the first with payload ``kind``."""
        out = []
        while True:
            envelope = self.recv(timeout)
            out.append(envelope)
            if envelope.WhichOneof("payload") == kind:
                return out

    def drain(self) -> None:
        """From now on, read the driver's stderr and status pipe in the background.

        For long tests that never look at them: a driver whose pipes are
        full blocks in the middle of an apply, and the test would blame the
        dataplane. After this, :meth:`recv` must not be used; :meth:`wait`
        still returns the whole stderr.
        """

        def discard_status() -> None:
            with contextlib.suppress(OSError):
                while os.read(self.from_driver, 65536):
                    pass

        self._in_background(discard_status, self._keep_stderr)

    def watch(self) -> None:
        """Like :meth:`drain`, but keep every envelope, with its arrival time.

        For benchmarks that time how long the driver takes to say something
        (an endpoint's status, DataplaneInSync) while it keeps talking.
        """

        def keep_status() -> None:
            buf = b""
            with contextlib.suppress(OSError):
                while chunk := os.read(self.from_driver, 65536):
                    now = time.monotonic()
                    buf += chunk
                    envelope, buf = _next_envelope(buf)
                    while envelope is not None:
                        with self._arrived:
                            self.received.append((now, envelope))
                            self._arrived.notify_all()
                        envelope, buf = _next_envelope(buf)

        self._in_background(keep_status, self._keep_stderr)

    def _keep_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := os.read(self.proc.stderr.fileno(), 65536):
            self._drained_stderr.append(chunk)

    def _in_background(self, *targets: Callable[[], None]) -> None:
        for target in targets:
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._drainers.append(thread)

    def wait_for(
        self,
        predicate: Callable[[pb.FromDataplane], bool],
        since: int = 0,
        timeout: float = 60.0,
    ) -> tuple[float, pb.FromDataplane]:
        """The first envelope from index ``since`` on that matches (watching harness)."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while True:
                for arrived, envelope in self.received[since:]:
                    if predicate(envelope):
                        return arrived, envelope
                since = len(self.received)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.proc.poll() is not None:
                    raise TimeoutError(
                        f"no such message from the driver:\n{self.stderr_so_far()[-2000:]}"
                    )
                self._arrived.wait(min(remaining, 0.5))

    def stderr_so_far(self) -> str:
        """What a draining harness has read from stderr up to now."""
        return b"".join(self._drained_stderr).decode(errors="replace")

    def close_input(self) -> None:
        os.close(self.to_driver)

    def kill(self) -> None:
        """Stop the driver abruptly (as a crash would), leaving the dataplane."""
        self.proc.kill()
        self.proc.wait(timeout=20)
        for fd in (self.to_driver, self.from_driver):
            with contextlib.suppress(OSError):
                os.close(fd)

    def wait(self, timeout: float = 20.0) -> tuple[int, str]:
        if self._drainers:
            self.proc.wait(timeout=timeout)
            for thread in self._drainers:
                thread.join(timeout)
            err = b"".join(self._drained_stderr)
        else:
            _, err = self.proc.communicate(timeout=timeout)
        with contextlib.suppress(OSError):
            os.close(self.from_driver)
        return self.proc.returncode, err.decode()
