"""A tool fed its input while the driver is still making it.

``nft -f`` parses its script as it reads it, and only once the input ends
looks at the kernel: it fetches the ruleset, evaluates every command
against it and commits the transaction. A 10 MB script (a node of 1,000
endpoints) takes nft about 0.9 s to parse, time in which the driver can
make the rest of the script and write the IP sets the rules look up: they
exist by the time the input ends. :func:`feeding` is that: what the caller
sends goes to the tool at once (from a writer thread, so the tool reads
while the loop thread works), and the input ends when the ``async with``
block does.

A block that raises ends the command *unfed*: it is killed before its
input ends, so a tool that acts at the end of its input never acts on a
part of it. Runners that cannot stream (fakes, wrappers that count or
hold) get the input gathered and run once the block is done, which is
the same order with nothing overlapped.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol, runtime_checkable

import trio

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import CommandResult, CommandRunner, ProcessRunner

__all__ = ["Fed", "FeedingRunner", "feeding", "gathered"]

# The pipe to the tool, raised from 64 KB (as far as fs.pipe-max-size
# lets): a megabyte the tool can read while the writer thread waits for
# the interpreter.
_PIPE_BYTES = 1 << 20


class Fed:
    """The input of one command, sent as it is made (see :func:`feeding`);
    its result once the ``async with`` block is done."""

    def __init__(self) -> None:
        self.result: CommandResult | None = None
        self.sent = 0  # bytes

    def send(self, data: bytes) -> None:
        """Queue ``data`` for the command (never waits)."""
        self.sent += len(data)
        self._send(data)

    def _send(self, data: bytes) -> None:
        raise NotImplementedError


@runtime_checkable
class FeedingRunner(CommandRunner, Protocol):
    """A runner that decides itself how a fed command runs (a wrapper that
    counts some tools passes the others on to the runner it wraps)."""

    def feeding(self, argv: Sequence[str]) -> AbstractAsyncContextManager[Fed]: ...


def feeding(runner: CommandRunner, argv: Sequence[str]) -> AbstractAsyncContextManager[Fed]:
    """Run ``argv`` on what the block sends, streamed where ``runner`` runs
    real processes; its result in the :class:`Fed`'s ``result`` after the
    block (a non-zero exit is the caller's to judge).

    Raises:
        ProgrammingError: the command could not be started.
    """
    if isinstance(runner, FeedingRunner):
        return runner.feeding(argv)
    if isinstance(runner, ProcessRunner):
        return _piped(runner.command(argv))
    return gathered(runner, argv)


class _Gathered(Fed):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[bytes] = []

    def _send(self, data: bytes) -> None:
        self.parts.append(data)


@asynccontextmanager
async def gathered(runner: CommandRunner, argv: Sequence[str]) -> AsyncIterator[Fed]:
    """The input gathered, and ``argv`` run on it once the block is done
    (and not at all if the block raises)."""
    fed = _Gathered()
    yield fed
    fed.result = await runner.run(argv, stdin=b"".join(fed.parts), check=False)


class _Piped(Fed):
    """Parts queued to a writer thread that owns the pipe's write end."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._parts: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        trio.lowlevel.start_thread_soon(lambda: _write_parts(fd, self._parts), lambda _: None)

    def _send(self, data: bytes) -> None:
        self._parts.put(data)

    def end(self) -> None:
        """No more input: the thread closes the pipe once it has written the rest."""
        self._parts.put(None)


def _write_parts(fd: int, parts: queue.SimpleQueue[bytes | None]) -> None:
    """The writer thread: each part into the pipe in order until the end,
    then close it. A tool gone (a broken pipe) has the rest dropped: its
    exit status says what happened."""
    broken = False
    try:
        while (part := parts.get()) is not None:
            view = memoryview(part)
            while view and not broken:
                try:
                    view = view[os.write(fd, view) :]
                except OSError:
                    broken = True
    finally:
        os.close(fd)


def _read_back(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    with os.fdopen(os.dup(fd), "rb") as file:
        return file.read()


@asynccontextmanager
async def _piped(argv: list[str]) -> AsyncIterator[Fed]:
    # The output goes to memory files, read once the tool is gone: nothing
    # has to drain a pipe while the caller's block runs.
    out, err = os.memfd_create("fed-stdout"), os.memfd_create("fed-stderr")
    try:
        read_end, write_end = os.pipe()  # neither inherited by other children
        with contextlib.suppress(OSError):  # the default size works, only slower
            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        try:
            proc = await trio.lowlevel.open_process(argv, stdin=read_end, stdout=out, stderr=err)
        except BaseException as exc:
            os.close(write_end)
            if isinstance(exc, OSError):
                raise ProgrammingError(f"{argv[0]}: cannot run: {exc}") from exc
            raise
        finally:
            os.close(read_end)
        fed = _Piped(write_end)
        try:
            try:
                yield fed
            except BaseException:
                # Killed before its input ends: the tool never acts on part of it.
                proc.kill()
                raise
            finally:
                fed.end()
            code = await proc.wait()
        except BaseException:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()
            raise
        fed.result = CommandResult(code, _read_back(out), _read_back(err))
    finally:
        os.close(out)
        os.close(err)
