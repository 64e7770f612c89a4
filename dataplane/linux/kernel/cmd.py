"""Running the kernel's command-line tools (iptables-restore, ipset, ...).

Programmers never call subprocess themselves: they get a
:class:`CommandRunner`, so tests can point them at a network namespace
(``netns``) or at a fake. Failures are translated into
:class:`~dataplane.errors.ProgrammingError` naming the command and its
stderr, which is what an operator needs in the log line.
"""

from __future__ import annotations

import io
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import trio

from dataplane.errors import ProgrammingError

__all__ = [
    "CommandResult",
    "CommandRunner",
    "ProcessRunner",
    "check_exit",
    "output_lines",
    "run_sync",
]


@dataclass(frozen=True, slots=True)
class CommandResult:
    returncode: int
    stdout: bytes
    stderr: bytes


class CommandRunner(Protocol):
    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        """Run ``argv``; with ``check``, a non-zero exit raises ProgrammingError."""


class ProcessRunner:
    """Runs commands as child processes, optionally inside a named netns.

    Args:
        netns: run every command as ``ip netns exec NETNS ...`` (tests use
            this to program a namespace from outside it; the driver itself
            runs inside the node's namespace and leaves it None).
    """

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns

    def command(self, argv: Sequence[str]) -> list[str]:
        """The command line that runs ``argv`` where this runner runs."""
        if self.netns is None:
            return list(argv)
        return ["ip", "netns", "exec", self.netns, *argv]

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        try:
            proc = await trio.run_process(
                self.command(argv),
                stdin=stdin if stdin is not None else b"",
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        except OSError as exc:
            raise ProgrammingError(f"{argv[0]}: cannot run: {exc}") from exc
        result = CommandResult(proc.returncode, proc.stdout, proc.stderr)
        if check:
            check_exit(argv, result)
        return result


def check_exit(argv: Sequence[str], result: CommandResult) -> None:
    """A non-zero exit as the one-line ProgrammingError an operator reads: the
    command and the tool's own words (a runner's ``check``)."""
    if result.returncode != 0:
        raise ProgrammingError(
            f"{' '.join(argv[:3])}: exit {result.returncode}: "
            + result.stderr.decode(errors="replace").strip().replace("\n", " | ")[:500]
        )


def run_sync(
    argv: Sequence[str], netns: str | None = None, *, timeout: float | None = None
) -> CommandResult:
    """Blocking variant for threads outside the trio loop (the metrics server's).

    Raises:
        ProgrammingError: the command could not run, or ran out of ``timeout``
            (it is killed). A non-zero exit is the caller's to judge.
    """
    full = list(argv) if netns is None else ["ip", "netns", "exec", netns, *argv]
    try:
        proc = subprocess.run(full, capture_output=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise ProgrammingError(f"{argv[0]}: no answer within {timeout} s") from exc
    except OSError as exc:
        raise ProgrammingError(f"{argv[0]}: cannot run: {exc}") from exc
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)


def output_lines(output: bytes) -> Iterator[str]:
    """A tool's output, line by line (newlines kept), decoded as it is read.

    For parsers that run in a worker thread: no single C call over the
    whole output (a decode, a split) holds the interpreter for its length,
    so the loop thread gets its turn every few milliseconds.
    """
    return io.TextIOWrapper(io.BytesIO(output), encoding="utf-8", errors="replace")
