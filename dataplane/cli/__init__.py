"""Command line: ``dataplane-driver`` (Felix mode) and its commands.

``dataplane-driver`` is the console script (``python -m dataplane`` and the
repository's ``driver.py`` run the same :func:`main`). With no command it
is Felix's external dataplane driver (:mod:`dataplane.cli.felix_mode`);
each command is a module of its own (``replay``, ``show``, ``explain``,
``health``, ``cleanup``, ``version``) over one table of global options
(:mod:`dataplane.cli.options`), which Felix, starting the driver with no
arguments, sets through ``DATAPLANE_*`` variables.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence

__all__ = ["EXIT_READER_GONE", "main"]

# A shell's status for a process its reader stopped reading (128 + SIGPIPE).
EXIT_READER_GONE = 141

# Their output is the answer: the loop's INFO lines would bury it.
_QUIET_COMMANDS = frozenset({"show", "explain", "health"})


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the command line; the exit code.

    Args:
        argv: the arguments (``sys.argv[1:]`` if None).
        environ: where ``DATAPLANE_*`` variables come from (``os.environ`` if None).
    """
    try:
        return _main(argv, environ)
    except BrokenPipeError:
        # The reader went away (`show --json | head -1`): nothing more to say
        # to it, and no traceback. Python flushes stdout again at exit, so it
        # goes to /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_READER_GONE


def _main(argv: Sequence[str] | None, environ: Mapping[str, str] | None) -> int:
    from dataplane.cli import felix_mode  # noqa: PLC0415 - after the parse: --help is quick
    from dataplane.cli.parser import COMMANDS, parse_args  # noqa: PLC0415

    args = parse_args(argv, environ)
    if args.command != "version":
        quiet = "WARNING" if args.command in _QUIET_COMMANDS else None
        _setup_logging(args.log_level or quiet, args.log_format)
    if args.command is None:
        return felix_mode.run(args)
    return COMMANDS[args.command].run(args)


def _setup_logging(level: str | None, log_format: str = "text") -> None:
    from dataplane.ops.logfmt import formatter  # noqa: PLC0415

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    logging.basicConfig(level=getattr(logging, level or "INFO"), handlers=[handler])
    # httpx says every request at INFO: a line per list page and per watch
    # (85 at a 20,000-service start). The reflector says what an operator
    # acts on (listed, retrying, listing again); the API client says each
    # request at DEBUG, which LogSeverityScreen can turn on too.
    logging.getLogger("httpx").setLevel(logging.WARNING)
