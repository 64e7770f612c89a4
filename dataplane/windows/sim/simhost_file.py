"""The simulated host's file, shared between processes as a real host is.

A real HNS host is changed by more than this driver: the CNI plugin
creates and deletes pods' endpoints while the driver runs. The simulated
host's file is shared the same way, by this protocol:

* every access (one HCN call, a test's set-up step, a flush) holds an
  exclusive ``flock`` on the host file itself for its whole
  read-modify-write; a reader takes the same lock, so it never sees half a
  file;
* the file is rewritten in place, never renamed over: a process blocked on
  the lock of a renamed-away inode would then read a file nobody writes;
* a process re-reads the file whenever its size or modification time
  differs from what it last saw. Modification times are as coarse as the
  kernel's clock tick, so a writer whose rewrite left both as they were
  moves the time on by a nanosecond: every change is seen.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["HostFile", "read_host_file"]

Stamp = tuple[int, int]  # (size, mtime in ns)


class HostFile:
    """One process's handle on a shared host file (``create``: an empty one if missing)."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = path
        self._flags = os.O_RDWR | (os.O_CREAT if create else 0)
        self._seen: Stamp | None = None
        self._fd: int | None = None

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, Any] | None]:
        """Hold the lock; yields the file's content if it changed since last seen, else None.

        Raises:
            ValueError: the file is not a JSON object.
            OSError: the file cannot be opened.
        """
        fd = os.open(self.path, self._flags, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._fd = fd
            stamp = _stamp(fd)
            data = None
            if stamp != self._seen:
                data = _parse(_read(fd))
                self._seen = stamp
            yield data
        finally:
            self._fd = None
            os.close(fd)  # closing drops the lock

    def write(self, data: dict[str, Any]) -> None:
        """Rewrite the file in place; only inside :meth:`locked`."""
        fd = self._fd
        if fd is None:
            raise RuntimeError("HostFile.write outside locked()")
        before = _stamp(fd)
        text = (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()
        os.lseek(fd, 0, os.SEEK_SET)
        view = memoryview(text)
        while view:
            view = view[os.write(fd, view) :]
        os.ftruncate(fd, len(text))
        after = _stamp(fd)
        if after == before:  # same size within one clock tick: make the change visible
            os.utime(fd, ns=(after[1] + 1, after[1] + 1))
            after = _stamp(fd)
        self._seen = after


def read_host_file(path: Path) -> dict[str, Any]:
    """A host file's content, read under its lock (for readers such as ``show --hns``).

    Raises:
        ValueError: the file is not a JSON object (the message names no path).
        OSError: the file cannot be read.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        return _parse(_read(fd))
    finally:
        os.close(fd)


def _stamp(fd: int) -> Stamp:
    st = os.fstat(fd)
    return st.st_size, st.st_mtime_ns


def _read(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        return {}  # a new file: an empty host
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError("the top level is not a JSON object")
    return data
