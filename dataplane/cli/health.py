"""``health``: probe a driver's /livez or /readyz, for an exec probe."""

from __future__ import annotations

import argparse

from dataplane.cli import values

__all__ = ["HELP", "add_arguments", "run"]

HELP = (
    "probe a driver's /livez (or /readyz with --ready) for an exec probe: exit 0 when it"
    " answers 200, else 1"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--address",
        type=values.listen,
        metavar="HOST:PORT",
        help="the driver's --listen address (default: DATAPLANE_LISTEN)",
    )
    parser.add_argument("--ready", action="store_true", help="probe /readyz instead")


def run(args: argparse.Namespace) -> int:
    from dataplane.ops.commands import run_health  # noqa: PLC0415 - only when used

    return run_health(args)
