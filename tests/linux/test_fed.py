"""A command fed its input while the caller works (``kernel/fed.py``).

With a real process: the tool reads each part as it is sent, before the
block ends; it gets every byte in order; its input ends when the block
does, and never when the block raises or is cancelled (it is killed
first, so a tool that acts at the end of its input never acts); a tool
that stops reading does not hang the caller. Runners that cannot stream
get the same input gathered, run at the end, and not at all after a raise.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import CommandResult, ProcessRunner
from dataplane.linux.kernel.fed import feeding

# Acts (writes DONE) only once its input has ended.
_AT_THE_END = 'cat > /dev/null && echo done > "$0"'


def told_at(path: Path) -> Path:
    """A FIFO a tool writes what it has read into (see :func:`told`)."""
    os.mkfifo(path)
    return path


async def told(fifo: Path) -> bytes:
    """What the tool wrote into ``fifo``, once it has closed it: opening
    and reading wait in a thread (with a deadline) for the tool to do both."""

    def read() -> bytes:
        with fifo.open("rb") as file:
            return file.read()

    with trio.fail_after(10):
        return await trio.to_thread.run_sync(read, abandon_on_cancel=True)


def test_every_byte_arrives_in_order_and_the_result_follows_the_block() -> None:
    parts = [os.urandom(1 << 20) for _ in range(6)] + [b"", b"end"]

    async def main() -> None:
        async with feeding(ProcessRunner(), ["cat"]) as fed:
            for part in parts:
                fed.send(part)
            assert fed.result is None
        assert fed.result is not None
        assert fed.result.returncode == 0
        assert fed.result.stdout == b"".join(parts)
        assert fed.sent == sum(map(len, parts))

    trio.run(main)


def test_the_tool_reads_each_part_before_the_block_ends(tmp_path: Path) -> None:
    first, done = told_at(tmp_path / "first"), tmp_path / "done"
    script = 'read line && echo "$line" > "$0" && cat > /dev/null && echo done > "$1"'

    async def main() -> None:
        async with feeding(ProcessRunner(), ["sh", "-c", script, str(first), str(done)]) as fed:
            fed.send(b"parsed while the caller works\n")
            # The input has not ended: the tool read it anyway.
            assert await told(first) == b"parsed while the caller works\n"
            assert not done.exists()
        assert done.exists()

    trio.run(main)


@pytest.mark.parametrize("how", ["raises", "cancelled"])
def test_a_block_that_fails_never_ends_the_tools_input(tmp_path: Path, how: str) -> None:
    done = tmp_path / "done"

    async def main() -> None:
        with trio.move_on_after(10) as scope:
            async with feeding(ProcessRunner(), ["sh", "-c", _AT_THE_END, str(done)]) as fed:
                fed.send(b"x" * (3 << 20))
                if how == "raises":
                    raise ProgrammingError("the IP sets were refused")
                scope.cancel()
                await trio.lowlevel.checkpoint()  # where the cancellation lands

    if how == "raises":
        with pytest.raises(ProgrammingError, match="refused"):
            trio.run(main)
    else:
        trio.run(main)
    assert not done.exists()  # killed before its input ended: it never acted


def test_the_same_tool_acts_when_the_block_ends(tmp_path: Path) -> None:
    done = tmp_path / "done"

    async def main() -> None:
        async with feeding(ProcessRunner(), ["sh", "-c", _AT_THE_END, str(done)]) as fed:
            fed.send(b"x" * (3 << 20))
        assert fed.result is not None and fed.result.returncode == 0

    trio.run(main)
    assert done.read_text() == "done\n"


def test_a_tool_that_stops_reading_does_not_hold_the_caller() -> None:
    async def main() -> None:
        with trio.fail_after(10):
            async with feeding(ProcessRunner(), ["sh", "-c", "echo no >&2; exit 3"]) as fed:
                for _ in range(8):
                    fed.send(b"y" * (1 << 20))
        assert fed.result is not None
        assert fed.result.returncode == 3 and fed.result.stderr == b"no\n"

    trio.run(main)


def test_a_tool_that_cannot_start_is_a_programming_error() -> None:
    async def main() -> None:
        async with feeding(ProcessRunner(), ["/nonexistent/tool"]):
            raise AssertionError("not reached")

    with pytest.raises(ProgrammingError, match="cannot run"):
        trio.run(main)


class Recording:
    """A runner of no processes: what it ran, with which input."""

    def __init__(self) -> None:
        self.ran: list[tuple[list[str], bytes]] = []

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        self.ran.append((list(argv), stdin or b""))
        return CommandResult(0, b"ok", b"")


def test_a_runner_that_cannot_stream_runs_the_gathered_input_at_the_end() -> None:
    runner = Recording()

    async def main() -> None:
        async with feeding(runner, ["nft", "-f", "/proc/self/fd/0"]) as fed:
            fed.send(b"add table ip t\n")
            fed.send(b"add chain ip t c\n")
            assert runner.ran == []  # nothing runs before the block ends
        assert fed.result == CommandResult(0, b"ok", b"")
        with pytest.raises(ProgrammingError):
            async with feeding(runner, ["nft", "-f", "/proc/self/fd/0"]) as fed:
                fed.send(b"add table ip u\n")
                raise ProgrammingError("refused")

    trio.run(main)
    assert runner.ran == [(["nft", "-f", "/proc/self/fd/0"], b"add table ip t\nadd chain ip t c\n")]
