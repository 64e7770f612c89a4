"""``replay FILE``: a recorded log through the same loop; the resulting state."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from typing import BinaryIO

import trio

from dataplane.cli.felix_mode import report_end
from dataplane.cli.platforms import platform as choose_platform
from dataplane.core.loop import Dataplane
from dataplane.errors import PlatformUnavailableError, ProtocolError
from dataplane.wire.transport import FileSource

__all__ = ["HELP", "add_arguments", "run"]

log = logging.getLogger("dataplane.cli")

HELP = (
    "run a recorded log (the fd 3 byte stream, e.g. from --record; '-' for stdin) through"
    " the same loop and print the resulting dataplane state; in memory unless --platform"
    " linux (or windows) is given explicitly"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="log file ('-' for stdin)")


def run(args: argparse.Namespace) -> int:
    # Replaying is for looking: it programs a kernel only when asked to
    # explicitly (--platform linux), never by "auto".
    try:
        platform = choose_platform("sim" if args.platform == "auto" else args.platform, args)
    except PlatformUnavailableError as exc:
        print(f"{args.prog} replay: {exc}", file=sys.stderr)
        return 1
    dataplane = Dataplane(platform, follow_log_severity=args.log_level is None)
    with contextlib.ExitStack() as stack:
        try:
            file: BinaryIO = (
                sys.stdin.buffer if args.file == "-" else stack.enter_context(open(args.file, "rb"))
            )
        except OSError as exc:
            print(f"{args.prog} replay: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
            return 2
        source = FileSource(file, max_frame_bytes=args.max_frame_bytes, release=args.felix_release)
        try:
            trio.run(dataplane.run, source)
        except ProtocolError as exc:
            log.critical("fatal: %s", exc)
            return 1
    outputs = dataplane.drain_output()
    kinds = sorted({str(env.WhichOneof("payload")) for env in outputs})
    stats = dataplane.stats
    print(
        f"# replayed {stats.messages} messages ({stats.rejected} rejected), {stats.applies}"
        f" apply(ies); in sync: {'yes' if dataplane.in_sync else 'no'};"
        f" sent {len(outputs)} message(s): {', '.join(kinds) or 'none'}"
    )
    sys.stdout.write(platform.dump())
    # A replay that did not end programmed is a failure a script must see.
    return report_end(dataplane, "replay ended")
