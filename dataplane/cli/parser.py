"""The command line's parser: the global options' table, then one parser per command."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dataplane.cli import cleanup, explain, health, replay, show, version
from dataplane.cli.options import BadEnv, add_options

__all__ = ["COMMANDS", "PROG", "Command", "build", "invoked_as", "parse_args"]

PROG = "dataplane-driver"


@dataclass(frozen=True)
class Command:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: dict[str, Command] = {
    name: Command(module.HELP, module.add_arguments, module.run)
    for name, module in (
        ("replay", replay),
        ("show", show),
        ("explain", explain),
        ("health", health),
        ("cleanup", cleanup),
        ("version", version),
    )
}

DESCRIPTION = """\
A Felix-compatible node dataplane driver.

With no command, runs as Calico Felix's external dataplane driver: reads
length-prefixed ToDataplane envelopes from fd 3 and writes FromDataplane
envelopes to fd 4 (Felix opens both pipes). Give Felix the path of
dataplane-driver as DataplaneDriver, with UseInternalDataplaneDriver false.
Logs go to stderr, one event a line, with the message sequence number.
Exits 0 when Felix closes fd 3, and 1 with a one-line error if the stream is
malformed. On SIGTERM (or SIGINT) it lets the apply in progress finish for
up to 1.5 s, logs one line and exits 0, leaving the dataplane as programmed.

Every option can also be set by an environment variable, named after it:
DATAPLANE_ and the option's name upper-cased with dashes as underscores
(--chain-prefix: DATAPLANE_CHAIN_PREFIX); a list (--host-address) is
comma-separated, and an empty variable counts as unset. An option given on
the command line wins over its variable. Options are accepted before the
command or after it.
"""

_EXAMPLES = """\
examples:
  DATAPLANE_RECORD=/var/log/calico/driver.log %(prog)s   # under Felix, keep a log
  %(prog)s replay examples/demo-node.log         # what would be programmed
  %(prog)s show --log examples/demo-node.log     # the same, as tables
  %(prog)s --platform windows --hns-fake host.json replay examples/demo-node.log
"""


def _epilog() -> str:
    lines = ["commands:"]
    for name, command in COMMANDS.items():
        wrapped = textwrap.wrap(command.help, 62)
        lines.append(f"  {name:<9} {wrapped[0]}")
        lines += [f"  {'':<9} {more}" for more in wrapped[1:]]
    return "\n".join(lines) + "\n\n" + _EXAMPLES


def invoked_as(argv0: str) -> str:
    """The program name to show: the one invoked if it is ours, else dataplane-driver."""
    name = os.path.basename(argv0)
    if name == "__main__.py":
        return "python -m dataplane"
    if name == "driver.py":  # the repository's wrapper script
        return name
    return PROG


def build(environ: Mapping[str, str] | None = None, prog: str = PROG) -> argparse.ArgumentParser:
    """The parser, with defaults from ``environ`` (``os.environ`` if None)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=DESCRIPTION,
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # A command's --log must not be taken for an abbreviation of --log-level.
        allow_abbrev=False,
    )
    parser.set_defaults(prog=prog)
    parser.add_argument(
        "--version",
        action="version",
        version=version.line(),
        help=version.FLAG_HELP,
    )
    add_options(parser, os.environ if environ is None else environ)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        sub = commands.add_parser(
            name, help=command.help, description=command.help, allow_abbrev=False
        )
        command.add_arguments(sub)
        add_options(sub, None, title="global options (also accepted before the command)")
    return parser


def parse_args(argv: Sequence[str] | None, environ: Mapping[str, str] | None) -> argparse.Namespace:
    parser = build(environ, prog=invoked_as(sys.argv[0]))
    args = parser.parse_args(argv)
    for value in vars(args).values():
        if isinstance(value, BadEnv):  # one line, as argparse's usage errors end
            parser.exit(2, f"{parser.prog}: error: {value.message}\n")
    return args
