"""``show``: the desired state, each object with its status, as an operator reads it."""

from __future__ import annotations

import argparse

from dataplane.cli import values
from dataplane.ops.kinds import SHOWN_KINDS

__all__ = ["HELP", "add_arguments", "add_source", "run"]

HELP = (
    "the desired state, each object with its status (pending, done, error), since when and"
    " its error: from a live driver (--address), a replayed log (--log) or an HNS file (--hns)"
)


def add_source(parser: argparse.ArgumentParser, *, hns: bool = False) -> None:
    """Where the state comes from: a live driver or a log (or an HNS host file)."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--address",
        type=values.listen,
        metavar="HOST:PORT",
        help="a live driver's --listen address (default: DATAPLANE_LISTEN)",
    )
    source.add_argument(
        "--log", metavar="FILE", help="replay this recorded log instead ('-': standard input)"
    )
    if hns:
        source.add_argument(
            "--hns",
            metavar="FILE",
            help="the objects a simulated HNS host holds (the file of --hns-fake FILE)",
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_source(parser, hns=True)
    parser.add_argument(
        "--json",
        action="store_true",
        help="the state as JSON: in_sync, waiting, taken_at and objects, one record each",
    )
    parser.add_argument(
        "--kind",
        action="append",
        type=values.one_of(*SHOWN_KINDS),
        metavar="KIND",
        help=f"only this kind (repeatable): {', '.join(SHOWN_KINDS)}",
    )


def run(args: argparse.Namespace) -> int:
    # rich and the replay are loaded only when asked for: the driver's own
    # start stays as fast as it was.
    from dataplane.ops.commands import run_show  # noqa: PLC0415

    return run_show(args)
