"""Command line: ``driver.py`` (Felix mode), ``replay``, ``version``."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import BinaryIO

import trio

from dataplane.errors import ProtocolError
from dataplane.framing import DEFAULT_MAX_FRAME_BYTES
from dataplane.loop import Dataplane
from dataplane.platform import Platform
from dataplane.sim import SimPlatform
from dataplane.transport import FileSource, PipeSink, PipeSource, check_pipe_fd

__all__ = ["main"]

log = logging.getLogger("dataplane.cli")

FELIX_INPUT_FD = 3
FELIX_OUTPUT_FD = 4

_DESCRIPTION = """\
A Felix-compatible node dataplane driver.

With no command, runs as Calico Felix's external dataplane driver: reads
length-prefixed ToDataplane envelopes from fd 3 and writes FromDataplane
envelopes to fd 4 (Felix opens both pipes). Logs go to stderr, one event a
line, with the message sequence number. Exits 0 when Felix closes fd 3,
and 1 with a one-line error if the stream is malformed.
"""

_EPILOG = """\
commands:
  replay FILE   run a recorded log (the fd 3 byte stream, e.g. from --record)
                through the same loop with the in-memory platform and print
                the resulting dataplane state
  version       print the version and the platforms available

examples:
  driver.py --record /var/log/calico/driver.log   # under Felix, keep a log
  driver.py replay examples/demo-node.log         # what would be programmed
"""


def _version() -> str:
    try:
        return metadata.version("dataplane")
    except metadata.PackageNotFoundError:
        return "unknown"


def _platform(name: str) -> Platform:
    # Kernel platforms plug in here as they land; "sim" keeps the desired
    # state in memory and is what runs when no kernel platform is chosen.
    if name == "sim":
        return SimPlatform()
    raise SystemExit(f"driver.py: unknown platform {name!r}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="driver.py",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--log-level",
        default=None,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level (default: INFO, then Felix's LogSeverityScreen)",
    )
    parser.add_argument(
        "--max-frame-bytes",
        type=int,
        default=DEFAULT_MAX_FRAME_BYTES,
        metavar="N",
        help="largest accepted frame; a longer length prefix is fatal (default: 64 MiB)",
    )
    parser.add_argument(
        "--platform",
        default="sim",
        choices=["sim"],
        help="dataplane to program (default: sim, in memory)",
    )
    parser.add_argument(
        "--record",
        metavar="FILE",
        help="append every byte received on fd 3 to FILE (a replayable log)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    replay = commands.add_parser("replay", help="replay a recorded log and print the state")
    replay.add_argument("file", metavar="FILE", help="log file ('-' for stdin)")
    commands.add_parser("version", help="print the version")
    return parser


def _setup_logging(level: str | None) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, level or "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _run_felix_mode(args: argparse.Namespace) -> int:
    try:
        check_pipe_fd(FELIX_INPUT_FD, "input from Felix")
        check_pipe_fd(FELIX_OUTPUT_FD, "output to Felix")
    except OSError as exc:
        print(
            f"driver.py: {exc.strerror}. With no command, driver.py runs as Felix's external"
            " dataplane driver and needs pipes on fds 3 and 4; see 'driver.py --help', or"
            " try 'driver.py replay FILE'.",
            file=sys.stderr,
        )
        return 2
    with contextlib.ExitStack() as stack:
        record: BinaryIO | None = None
        if args.record:
            record = stack.enter_context(open(args.record, "ab"))
        source = PipeSource(FELIX_INPUT_FD, max_frame_bytes=args.max_frame_bytes, record_to=record)
        sink = PipeSink(FELIX_OUTPUT_FD)
        dataplane = Dataplane(_platform(args.platform), follow_log_severity=args.log_level is None)
        log.info("driver %s starting, platform %s", _version(), args.platform)
        try:
            trio.run(dataplane.run, source, sink)
        except ProtocolError as exc:
            log.critical("fatal: %s", exc)
            return 1
    log.info("stopped cleanly (%d messages)", dataplane.stats.messages)
    return 0


def _run_replay(args: argparse.Namespace) -> int:
    platform = SimPlatform()
    dataplane = Dataplane(platform, follow_log_severity=args.log_level is None)
    with contextlib.ExitStack() as stack:
        file: BinaryIO = (
            sys.stdin.buffer if args.file == "-" else stack.enter_context(open(args.file, "rb"))
        )
        try:
            trio.run(dataplane.run, FileSource(file, max_frame_bytes=args.max_frame_bytes))
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
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "version":
        print(f"dataplane {_version()} (Felix felixbackend.proto; platforms: sim)")
        return 0
    _setup_logging(args.log_level)
    if args.command == "replay":
        return _run_replay(args)
    return _run_felix_mode(args)
