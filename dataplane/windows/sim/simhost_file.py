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

The file is one JSON object. Its layout is for speed and for a person's
diff, not part of its meaning: members one per line, in the writer's
order, and lists of objects one object per line, each object compact with
its keys sorted — the standard library's C encoder (an indented dump takes
the pure-Python one, 20 times slower), and the unit a writer can keep
encoded between writes (:func:`encode`, :func:`document`).
A rewrite writes from the first byte that differs from what the file held
(a writer puts what changes at every write last): one endpoint changed
in a 10 MB host rewrites the objects after it, not the whole file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["HostFile", "document", "encode", "read_host_file"]

Stamp = tuple[int, int]  # (size, mtime in ns)


class HostFile:
    """One process's handle on a shared host file (``create``: an empty one if missing)."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = path
        self._flags = os.O_RDWR | (os.O_CREAT if create else 0)
        self._seen: Stamp | None = None
        self._held = b""  # the file's bytes as last read or written here
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
                raw = _read(fd)
                data = _parse(raw)
                self._held, self._seen = raw, stamp
            yield data
        finally:
            self._fd = None
            os.close(fd)  # closing drops the lock

    def write(self, data: dict[str, Any]) -> None:
        """Rewrite the file in place with ``data``; only inside :meth:`locked`."""
        members = {key: encode(data[key]) for key in sorted(data)}
        self.write_document(document(members))

    def write_document(self, text: bytes) -> None:
        """Rewrite the file in place with a :func:`document`; only inside :meth:`locked`."""
        fd = self._fd
        if fd is None:
            raise RuntimeError("HostFile.write outside locked()")
        before = _stamp(fd)
        # Inside locked() the file holds _held (re-read there if another
        # process wrote it): only what differs from it on is written.
        offset = _common_prefix(self._held, text) if before == self._seen else 0
        view = memoryview(text)[offset:]
        while view:
            written = os.pwrite(fd, view, offset)
            view, offset = view[written:], offset + written
        os.ftruncate(fd, len(text))
        self._held = text
        after = _stamp(fd)
        if after == before:  # same size within one clock tick: make the change visible
            os.utime(fd, ns=(after[1] + 1, after[1] + 1))
            after = _stamp(fd)
        self._seen = after


def _common_prefix(old: bytes, new: bytes, step: int = 1 << 16) -> int:
    """How many leading bytes ``old`` and ``new`` share, to ``step``'s granularity
    (each comparison of a block is one memcmp)."""
    same, most = 0, min(len(old), len(new))
    while same + step <= most and old[same : same + step] == new[same : same + step]:
        same += step
    return same


def encode(value: Any) -> bytes:
    """One value as the file holds it: compact, keys sorted."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def document(members: Mapping[str, bytes | Sequence[bytes]]) -> bytes:
    """The file's text: a JSON object of :func:`encode`-d members, one per line in
    the order given; a sequence is an array of encoded values, one per line.
    One join: the file is copied once however many objects it holds."""
    parts = [b"{\n"]
    for index, (key, value) in enumerate(members.items()):
        parts.append(b"%s%s: " % (b",\n" if index else b"", json.dumps(key).encode()))
        if isinstance(value, bytes):
            parts.append(value)
            continue
        parts.append(b"[")
        for position, item in enumerate(value):
            parts += (b",\n" if position else b"\n", item)
        parts.append(b"\n]" if value else b"]")
    parts.append(b"\n}\n")
    return b"".join(parts)


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
