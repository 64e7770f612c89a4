"""``show``, ``explain`` and ``health``: the operator's commands.

Each reads one of three sources: a live driver (``--address``, its HTTP
server), a recorded log (``--log``, replayed through the loop into the
in-memory platform with the same tracking a live driver has), or, for
``show``, nothing else. Output is aligned tables (rich) for people and
``--json`` for tools; a long replay shows a progress bar, on a terminal
only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import trio
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from dataplane.core.loop import Dataplane
from dataplane.errors import ProtocolError
from dataplane.ops.address import ListenAddress
from dataplane.ops.hns_records import hns_records
from dataplane.ops.kinds import KIND_ORDER
from dataplane.ops.metrics import Metrics
from dataplane.ops.objects import Snapshot
from dataplane.ops.observer import Observer
from dataplane.ops.records import state_document
from dataplane.sim import SimPlatform
from dataplane.wire.transport import FileSource

__all__ = ["SourceError", "fetch_json", "replay_snapshot", "run_health", "run_show"]

# How long a probe or a query waits for the driver's answer.
HTTP_TIMEOUT = 5.0


class SourceError(Exception):
    """The source cannot be read (one line for the operator, exit 2)."""


def fetch_json(address: ListenAddress, path: str) -> tuple[int, Any]:
    """GET ``path`` from a live driver; (HTTP status, decoded JSON body)."""
    url = f"http://{address}{path}"
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as response:
            return int(response.status), json.load(response)
    except urllib.error.HTTPError as exc:  # 503 and friends still carry a body
        with exc:
            try:
                return exc.code, json.load(exc)
            except json.JSONDecodeError:
                return exc.code, {"error": exc.reason}
    except (urllib.error.URLError, OSError, json.JSONDecodeError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SourceError(f"cannot read {url}: {reason}") from exc


class _Counting:
    """A file wrapper that reports bytes read (for the progress bar)."""

    def __init__(self, file: BinaryIO, advance: Callable[[int], None]) -> None:
        self._file = file
        self._advance = advance

    def read(self, size: int = -1) -> bytes:
        data = self._file.read(size)
        self._advance(len(data))
        return data


@contextmanager
def _progress(file: BinaryIO, path: str) -> Iterator[BinaryIO]:
    """``file``, with a progress bar on stderr while it is read, on a terminal only."""
    try:
        total = os.fstat(file.fileno()).st_size
    except (OSError, ValueError):
        total = 0
    if not sys.stderr.isatty() or total < (1 << 20):
        yield file
        return
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(f"replaying {path}", total=total)
        counting = _Counting(file, lambda n: progress.advance(task, n))
        yield counting  # type: ignore[misc]  # read() is all FileSource uses


def replay_snapshot(path: str, *, max_frame_bytes: int, release: str) -> tuple[Snapshot, Dataplane]:
    """Replay the log at ``path`` ('-': standard input) into the in-memory
    platform; its last snapshot.

    Raises:
        SourceError: the file cannot be read, or its stream is malformed.
    """
    observer = Observer(SimPlatform(), metrics=Metrics(process=False))
    dataplane = Dataplane(observer.platform, observer=observer)
    try:
        with contextlib.ExitStack() as stack:
            raw: BinaryIO = (
                sys.stdin.buffer if path == "-" else stack.enter_context(open(path, "rb"))
            )
            file = stack.enter_context(_progress(raw, path))
            source = FileSource(file, max_frame_bytes=max_frame_bytes, release=release)
            trio.run(dataplane.run, source)
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror}") from exc
    except ProtocolError as exc:
        raise SourceError(f"{path}: {exc}") from exc
    return observer.platform.publish(), dataplane


def _state(args: argparse.Namespace) -> dict[str, Any]:
    """The state document (``/state``'s) from a live driver, a log or an HNS file."""
    if getattr(args, "hns", None) is not None:
        try:
            objects = hns_records(Path(args.hns))
        except OSError as exc:
            raise SourceError(f"cannot read {args.hns}: {exc.strerror}") from exc
        except ValueError as exc:  # JSONDecodeError too
            raise SourceError(f"{args.hns}: not an HNS host file: {exc}") from exc
        # The file is what HNS holds: programmed by definition.
        return {"taken_at": None, "in_sync": True, "waiting": None, "objects": objects}
    if args.log is not None:
        snap, _ = replay_snapshot(
            args.log, max_frame_bytes=args.max_frame_bytes, release=args.felix_release
        )
        return state_document(snap)
    status, body = fetch_json(source_address(args), "/state")
    if status != 200:
        raise SourceError(f"{source_address(args)}/state answered {status}: {body}")
    document: dict[str, Any] = body
    return document


def not_in_sync_line(waiting: str | None) -> str:
    """The one line ``show`` and ``explain`` print when the node is not in sync."""
    return f"NOT IN SYNC ({waiting or 'no input yet'}): what follows was received, not programmed"


def source_address(args: argparse.Namespace) -> ListenAddress:
    address: ListenAddress | None = args.address or args.listen
    if address is None:
        raise SourceError(
            "no source: give --address HOST:PORT (a driver started with --listen)"
            " or --log FILE (or set DATAPLANE_LISTEN)"
        )
    return address


# --- show ------------------------------------------------------------------------------

_BASE = ("kind", "id", "status", "since", "error")


def _cell(value: object) -> str:
    if isinstance(value, list):
        return "\n".join(_cell(v) for v in value)
    if isinstance(value, dict):
        if "tier" in value and "policies" in value:
            return f"{value['tier']}: {', '.join(value['policies']) or '-'}"
        if "endpoint" in value and "chosen" in value:
            node = f" ({value['node']})" if value["node"] else ""
            said = ", ".join(value["chosen"]) or "not chosen"
            if value["chosen"] and value["state"] != "active":
                said += f" ({value['state']})"
            why = f"; {value['why_not']}" if value["why_not"] else ""
            return f"{value['endpoint']}{node}: {said}{why}"
        return ", ".join(f"{k}={_cell(v)}" for k, v in value.items())
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


# Columns a table leaves out (still in --json): detail an operator rarely
# reads beside the others.
_HIDDEN = {
    "workload_endpoint": {"state", "profiles"},
    "host_endpoint": {"untracked", "pre_dnat", "forward"},
}


def _age(since: str, now: datetime) -> str:
    """``2026-11-24T06:00:12.355Z`` -> ``3m12s``, as kubectl and cilium print ages."""
    s = max(0, int((now - datetime.fromisoformat(since.replace("Z", "+00:00"))).total_seconds()))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def _columns(kind: str, rows: list[dict[str, Any]]) -> list[str]:
    hidden = _HIDDEN.get(kind, set())
    extra = [
        k
        for k in dict.fromkeys(k for row in rows for k in row)
        if k not in _BASE and k not in hidden
    ]
    return ["id", "status", "age", *extra, "error"]


def _table(kind: str, rows: list[dict[str, Any]], now: datetime) -> Table:
    columns = _columns(kind, rows)
    table = Table(title=f"{kind} ({len(rows)})", title_justify="left")
    for column in columns:
        table.add_column(column.upper().replace("_", " "), overflow="fold")
    style = {"error": "red", "pending": "yellow"}
    for row in rows:
        cells = [_age(row["since"], now) if c == "age" else _cell(row.get(c)) for c in columns]
        table.add_row(*cells, style=style.get(row["status"]))
    return table


def _by_kind(objects: list[dict[str, Any]]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Each kind's records, in the order a packet meets them."""
    kinds = [*KIND_ORDER, *sorted({o["kind"] for o in objects} - set(KIND_ORDER))]
    for kind in kinds:
        rows = [o for o in objects if o["kind"] == kind]
        if rows:
            yield kind, rows


def _summary(objects: list[dict[str, Any]]) -> str:
    errors = sum(1 for o in objects if o["status"] == "error")
    pending = sum(1 for o in objects if o["status"] == "pending")
    noun = "object" if len(objects) == 1 else "objects"
    return f"{len(objects)} {noun}: {errors} error, {pending} pending"


def render_tables(objects: list[dict[str, Any]], console: Console) -> None:
    """One table per kind, fitted to the terminal's width."""
    now = datetime.now(UTC)
    for kind, rows in _by_kind(objects):
        console.print(_table(kind, rows, now))
    console.print(_summary(objects))


def render_blocks(objects: list[dict[str, Any]], out: TextIO) -> None:
    """Off a terminal: per kind its title, then one block per record, a line per
    field and a line per item of a list, so grep finds a whole field and no
    column is folded to a width nobody reads it at."""
    now = datetime.now(UTC)
    for kind, rows in _by_kind(objects):
        out.write(f"{kind} ({len(rows)})\n")
        columns = _columns(kind, rows)[1:]  # the id heads each block
        for row in rows:
            out.write(f"\n{kind} {row['id']}\n")
            for column in columns:
                value = row.get(column)
                if column == "age":
                    out.write(f"  age: {_age(row['since'], now)}\n")
                elif isinstance(value, list):
                    out.write(f"  {column}:{'' if value else ' -'}\n")
                    out.writelines(f"    {_cell(item)}\n" for item in value)
                elif value not in (None, ""):
                    out.write(f"  {column}: {_cell(value)}\n")
        out.write("\n")
    out.write(_summary(objects) + "\n")


class _Console(Console):
    """rich's console, but a reader that went away ends the command as any
    other write to a closed pipe does (the CLI's one exit code for it)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def run_show(args: argparse.Namespace) -> int:
    try:
        document = _state(args)
    except SourceError as exc:
        print(f"{args.prog} show: {exc}", file=sys.stderr)
        return 2
    if args.kind:
        document["objects"] = [o for o in document["objects"] if o["kind"] in args.kind]
    if args.json:
        json.dump(document, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if not document.get("in_sync", True):
        print(not_in_sync_line(document.get("waiting")))
    if sys.stdout.isatty():
        render_tables(document["objects"], _Console())
    else:
        render_blocks(document["objects"], sys.stdout)
    return 0


# --- health ----------------------------------------------------------------------------


def run_health(args: argparse.Namespace) -> int:
    """Probe ``/livez`` (or ``/readyz``); exit 0 when it answers 200, else 1."""
    path = "/readyz" if args.ready else "/livez"
    try:
        status, body = fetch_json(source_address(args), path)
    except SourceError as exc:
        print(f"{args.prog} health: {exc}", file=sys.stderr)
        return 1
    failing = [c for c in body.get("checks", []) if not c.get("ok")]
    shown = failing or body.get("checks", [])
    summary = "; ".join(f"{c['name']}: {c['detail']}" for c in shown)
    print(f"{path} {status} {'ok' if status == 200 else 'fail'}: {summary}")
    return 0 if status == 200 else 1
