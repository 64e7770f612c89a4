"""Endpoint-status files, written as Felix's own reporter would write them.

The CNI plugin (with ``policy_setup_timeout_seconds``) holds a pod's start
until ``<EndpointStatusPathPrefix>/endpoint-status/<name>`` exists, and
confd reads the BGP peer from it. Felix writes these files from the status
its dataplane reports — but only after its reporter has seen
``DataplaneInSync``, and for an external driver Felix never passes that on
(``felix/dataplane/external/ext_dataplane.go``: ``RecvMessage`` maps five
status payloads and logs "Ignoring unknown message" for the rest, in
v3.30.7, v3.31.7, v3.32.1 and master; ``felix/statusrep/
status_file_reporter.go`` reconciles files only once ``inSyncWithUpstream``).
So under Felix no file is ever written for our endpoints unless we write
them: :class:`StatusFileSink` does, from exactly the envelopes it sends
Felix, with Felix's names, content and pruning. Felix's reporter, which
never reconciles, does not fight it.

Semantics (Felix's, v3.30 to master): an update without the endpoint is
ignored whatever its status; otherwise a workload's file is written when
its status is ``up`` (content from the endpoint the update carries),
deleted on ``down`` or a remove, left as it is on ``error``; host endpoints
get none. Nothing is written before ``DataplaneInSync``; at it, the whole
directory is made to hold exactly the wanted files (stale ones from before
a restart go), and after it each change is written as it is sent.

Only the file system is touched here, never the kernel; a write that fails
is logged (once per cause until one succeeds) and retried with the next
full pass, and never stops the driver.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import trio

from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.transport import MessageSink

__all__ = ["StatusFileSink", "StatusFiles", "status_file_content", "status_file_name"]

log = logging.getLogger(__name__)

SUBDIR = "endpoint-status"
FILE_MODE = 0o644
DIR_MODE = 0o755
# Go's url.PathEscape (libcalico-go's names package escapes each id field
# with it): besides letters, digits and "-_.~" it keeps "$&+:=@"; every
# other byte of the UTF-8 encoding becomes %XX in upper-case hex.
_PATH_SAFE = "$&+:=@"


def status_file_name(wid: pb.WorkloadEndpointID) -> str:
    """``<orchestrator> <workload> <endpoint>``, each escaped as Go's PathEscape."""
    fields = (wid.orchestrator_id, wid.workload_id, wid.endpoint_id)
    return " ".join(quote(field, safe=_PATH_SAFE) for field in fields)


def status_file_content(ep: pb.WorkloadEndpoint) -> bytes:
    """Compact JSON in Felix's key order, each key left out when empty."""
    body: dict[str, object] = {}
    for key, value in (
        ("ifaceName", ep.name),
        ("mac", ep.mac),
        ("ipv4Nets", list(ep.ipv4_nets)),
        ("ipv6Nets", list(ep.ipv6_nets)),
        ("bgpPeerName", ep.local_bgp_peer.bgp_peer_name),
    ):
        if value:
            body[key] = value
    return json.dumps(body, separators=(",", ":")).encode()


class StatusFiles:
    """What the directory should hold, from the envelopes sent to Felix. No I/O.

    Invariant: ``pending`` names every file whose wanted state (content, or
    absent) may differ from what was last written.
    """

    def __init__(self) -> None:
        self.wanted: dict[str, bytes] = {}
        self.pending: set[str] = set()
        self.in_sync = False
        self.full_pass_due = False  # the next write makes the directory exact

    def feed(self, envelope: pb.FromDataplane) -> None:
        kind = envelope.WhichOneof("payload")
        if kind == "workload_endpoint_status_update":
            update = envelope.workload_endpoint_status_update
            name = status_file_name(update.id)
            status = update.status.status
            if not update.HasField("endpoint"):
                # Felix's reporter returns before the status switch when the
                # endpoint is missing (it cannot build the file's content),
                # so even a "down" without it leaves the file alone.
                return
            if status == "up":
                self._want(name, status_file_content(update.endpoint))
            elif status == "down":
                self._want(name, None)
        elif kind == "workload_endpoint_status_remove":
            self._want(status_file_name(envelope.workload_endpoint_status_remove.id), None)
        elif kind == "dataplane_in_sync" and not self.in_sync:
            self.in_sync = True
            self.full_pass_due = True

    def _want(self, name: str, content: bytes | None) -> None:
        if content is None:
            if self.wanted.pop(name, None) is None and name not in self.pending:
                return
        elif self.wanted.get(name) == content:
            return
        else:
            self.wanted[name] = content
        self.pending.add(name)

    def due(self) -> bool:
        return self.in_sync and (self.full_pass_due or bool(self.pending))


def write_full(directory: Path, wanted: dict[str, bytes]) -> None:
    """Make ``directory`` hold exactly ``wanted`` (Felix's reconcile after in-sync).

    Raises:
        OSError: the directory cannot be made, read or written.
    """
    directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    present = {entry.name for entry in os.scandir(directory)}
    for name in present - wanted.keys():
        (directory / name).unlink(missing_ok=True)
    for name, content in wanted.items():
        path = directory / name
        if name in present:
            try:
                if path.read_bytes() == content:
                    continue
            except OSError:
                pass  # unreadable: write it anew
        _write(path, content)


def write_changes(directory: Path, changes: dict[str, bytes | None]) -> None:
    """Write or delete the named files only.

    Raises:
        OSError: one could not be written; those before it were.
    """
    directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    for name, content in changes.items():
        path = directory / name
        if content is None:
            path.unlink(missing_ok=True)
        else:
            _write(path, content)


def _write(path: Path, content: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(content)


class StatusFileSink:
    """Forwards every envelope to Felix, then keeps the status directory as Felix would.

    ``prefix`` returns the current ``EndpointStatusPathPrefix`` (it arrives
    in Felix's ConfigUpdate, so it is read when needed); an empty one
    writes nothing, as in Felix.
    """

    def __init__(self, inner: MessageSink, prefix: Callable[[], str]) -> None:
        self.inner = inner
        self.prefix = prefix
        self.files = StatusFiles()
        self.writes = 0  # passes that succeeded, for tests and operators
        self._failing: str | None = None

    async def send(self, envelope: pb.FromDataplane) -> None:
        await self.inner.send(envelope)
        self.files.feed(envelope)
        if self.files.due():
            await self._write()

    def directory(self) -> Path | None:
        prefix = self.prefix()
        return Path(prefix) / SUBDIR if prefix else None

    async def _write(self) -> None:
        files = self.files
        directory = self.directory()
        if directory is None:
            files.pending.clear()
            files.full_pass_due = False
            return
        try:
            if files.full_pass_due:
                # Thousands of files at the first sync: off the loop.
                snapshot = dict(files.wanted)
                files.pending.clear()
                files.full_pass_due = False
                await trio.to_thread.run_sync(write_full, directory, snapshot)
            else:
                changes = {name: files.wanted.get(name) for name in files.pending}
                files.pending.clear()
                write_changes(directory, changes)  # a file or two: microseconds
        except OSError as exc:
            files.full_pass_due = True  # the next change tries the whole directory again
            cause = f"{type(exc).__name__}: {exc.strerror or exc}"
            if cause != self._failing:
                self._failing = cause
                log.warning(
                    "endpoint-status files in %s not written (%s); the next status change"
                    " retries the whole directory",
                    directory,
                    exc,
                )
            return
        if self._failing is not None:
            log.info("endpoint-status files in %s written again", directory)
            self._failing = None
        self.writes += 1
