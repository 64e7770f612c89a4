"""FakeConntrack: the ``conntrack`` command line over an in-memory table.

A :class:`~dataplane.linux.kernel.cmd.CommandRunner` that only knows ``conntrack``
and models what :class:`~dataplane.linux.kernel.conntrack.ConntrackCleaner` relies
on, as conntrack-tools 1.4.7 behaves (tests/linux/test_conntrack.py runs
the same contract against both):

- ``-I`` inserts an entry: family from the addresses (``-f`` is refused);
  ``-L`` lists them (``-f`` filters; all families without it);
- ``-D`` deletes every entry matching all the filters given (``-f``
  defaults to ipv4; ``-p``, ``--orig-dst``/``-d``, ``--orig-port-dst``/
  ``--dport``, ``--reply-src``/``-r``, ``--reply-port-src``), prints
  ``N flow entries have been deleted.`` on stderr and exits 0, or exits 1
  with ``0 flow ...`` when nothing matched;
- an address of the other family than ``-f`` is ``mismatched address
  family``, exit 2.

Fault switch: ``fail_deletes = N`` makes the next N deletions fail as the
real tool does when the kernel refuses (exit 1, ``Operation failed``);
``missing = True`` makes the tool absent (the runner's ProgrammingError).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import CommandResult

__all__ = ["Entry", "FakeConntrack"]

_PREFIX = b"conntrack v1.4.7 (conntrack-tools): "
_ALIASES = {
    "-s": "--orig-src",
    "-d": "--orig-dst",
    "-r": "--reply-src",
    "-q": "--reply-dst",
    "--sport": "--orig-port-src",
    "--dport": "--orig-port-dst",
    "-p": "--proto",
    "-f": "--family",
    "-t": "--timeout",
    "-u": "--status",
}


@dataclass(frozen=True, slots=True)
class Entry:
    """One conntrack entry: the original and the reply tuple."""

    protocol: str
    src: str
    dst: str
    sport: int
    dport: int
    reply_src: str
    reply_dst: str
    reply_sport: int
    reply_dport: int

    @property
    def family(self) -> int:
        return ipaddress.ip_address(self.src).version

    def line(self) -> str:
        """As ``conntrack -L`` prints it (without timeout, state and flags)."""
        return (
            f"{self.protocol} src={self.src} dst={self.dst} sport={self.sport}"
            f" dport={self.dport} src={self.reply_src} dst={self.reply_dst}"
            f" sport={self.reply_sport} dport={self.reply_dport}"
        )


def _result(code: int, message: str, stdout: str = "") -> CommandResult:
    return CommandResult(code, stdout.encode(), _PREFIX + message.encode() + b"\n")


class FakeConntrack:
    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.fail_deletes = 0
        self.missing = False
        self.deletes = 0  # how many -D ran (for tests that count work)

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        if not argv or argv[0] != "conntrack" or self.missing:
            name = argv[0] if argv else "?"
            raise ProgrammingError(f"{name}: cannot run: [Errno 2] No such file or directory")
        result = self._main(list(argv[1:]))
        if check and result.returncode != 0:
            raise ProgrammingError(f"conntrack: exit {result.returncode}: {result.stderr!r}")
        return result

    def _main(self, args: list[str]) -> CommandResult:
        command, options = args[0], {}
        rest = args[1:]
        for flag, value in zip(rest[::2], rest[1::2], strict=True):
            options[_ALIASES.get(flag, flag)] = value
        if command == "-I":
            return self._insert(options)
        if command == "-L":
            family = {"ipv4": 4, "ipv6": 6}.get(options.get("--family", ""))
            shown = [e for e in self.entries if family is None or e.family == family]
            out = "".join(e.line() + "\n" for e in shown)
            return _result(0, f"{len(shown)} flow entries have been shown.", out)
        if command == "-D":
            return self._delete(options)
        return _result(2, f"fake: command {command} is not modelled")

    def _insert(self, o: dict[str, str]) -> CommandResult:
        if "--family" in o:
            return _result(2, "Illegal option `--family' with this command")
        self.entries.append(
            Entry(
                o["--proto"],
                o["--orig-src"],
                o["--orig-dst"],
                int(o["--orig-port-src"]),
                int(o["--orig-port-dst"]),
                o["--reply-src"],
                o["--reply-dst"],
                int(o["--reply-port-src"]),
                int(o["--reply-port-dst"]),
            )
        )
        return _result(0, "1 flow entries have been created.")

    def _delete(self, o: dict[str, str]) -> CommandResult:
        self.deletes += 1
        family = {"ipv4": 4, "ipv6": 6}[o.get("--family", "ipv4")]
        for flag in ("--orig-dst", "--reply-src"):
            if flag in o and ipaddress.ip_address(o[flag]).version != family:
                return _result(2, "mismatched address family")
        if self.fail_deletes:
            self.fail_deletes -= 1
            return _result(1, "Operation failed: Operation not permitted")

        def matches(e: Entry) -> bool:
            wanted = (
                ("--proto", e.protocol),
                ("--orig-dst", e.dst),
                ("--orig-port-dst", str(e.dport)),
                ("--reply-src", e.reply_src),
                ("--reply-port-src", str(e.reply_sport)),
            )
            return e.family == family and all(
                flag not in o or _same(o[flag], value) for flag, value in wanted
            )

        kept = [e for e in self.entries if not matches(e)]
        deleted = len(self.entries) - len(kept)
        self.entries = kept
        return _result(0 if deleted else 1, f"{deleted} flow entries have been deleted.")


def _same(given: str, held: str) -> bool:
    try:
        return ipaddress.ip_address(given) == ipaddress.ip_address(held)
    except ValueError:
        return given == held
