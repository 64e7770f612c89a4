"""``explain``: which endpoint, service, tier, policy and rule decide a packet."""

from __future__ import annotations

import argparse

from dataplane.cli import values
from dataplane.cli.show import add_source

__all__ = ["HELP", "add_arguments", "run"]

HELP = (
    "which endpoint, service, tier, policy and rule decide a packet, from a live driver's"
    " state (--address) or a replayed log (--log); exit 1 when the node is not in sync"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_source(parser)
    parser.add_argument("--from", dest="src", required=True, metavar="IP")
    parser.add_argument("--to", dest="dst", required=True, metavar="IP")
    parser.add_argument("--proto", required=True, **values.enum("tcp", "udp", "icmp", "sctp"))
    parser.add_argument(
        "--port", type=values.positive_int, metavar="N", help="destination port (tcp, udp)"
    )
    parser.add_argument("--json", action="store_true", help="the verdict and steps as JSON")


def run(args: argparse.Namespace) -> int:
    from dataplane.ops.explain_cmd import run_explain  # noqa: PLC0415 - only when used

    return run_explain(args)
