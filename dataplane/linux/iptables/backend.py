"""Choosing the iptables backend (legacy or nft), as kube-proxy does.

Two backends can coexist on a host, and rules in the one the rest of the
system does not use are silently ignored by nothing but confusion. With
``IptablesBackend=auto`` we look at which backend already holds more rules
(ours from a previous run included) and use that one; on a clean host we
prefer nft, the modern default. The decision is made once, at start;
:class:`IptablesCommands` names the save/restore tools of the one chosen.
"""

from __future__ import annotations

import functools
import logging
import shutil
from dataclasses import dataclass

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import CommandRunner, run_sync
from dataplane.linux.kernel.side_by_side import side_by_side

__all__ = ["IptablesCommands", "detect_backend", "read_counters"]

log = logging.getLogger(__name__)


async def _rule_count(runner: CommandRunner, mode: str) -> tuple[int | None, str]:
    """Our-and-others' rules in ``mode``'s tables, or None and why they could not be read."""
    total = 0
    for base in ("iptables", "ip6tables"):
        binary = f"{base}-{mode}-save"
        if shutil.which(binary) is None:
            return None, f"{binary} is not installed"
        result = await runner.run([binary], check=False)
        if result.returncode != 0:
            # Keep the tool's own words: "Permission denied (you must be
            # root)" is the fix, "not found" would send the operator astray.
            lines = result.stderr.decode(errors="replace").strip().splitlines()
            return None, f"{binary}: exit {result.returncode}: {lines[-1] if lines else ''}"
        total += sum(1 for line in result.stdout.splitlines() if line.startswith(b"-A "))
    return total, ""


async def detect_backend(runner: CommandRunner, configured: str = "auto") -> str:
    """Return "legacy" or "nft"; ProgrammingError if neither can be read."""
    if configured in ("legacy", "nft"):
        return configured
    counts: dict[str, tuple[int | None, str]] = {}

    async def count(mode: str) -> None:
        counts[mode] = await _rule_count(runner, mode)

    # The two backends' saves read different kernels' tables: side by side.
    await side_by_side(*(functools.partial(count, mode) for mode in ("legacy", "nft")))
    legacy, why_legacy = counts["legacy"]
    nft, why_nft = counts["nft"]
    if legacy is None and nft is None:
        raise ProgrammingError(f"cannot read iptables with either backend: {why_legacy}; {why_nft}")
    choice = "legacy" if nft is None or (legacy is not None and legacy > nft) else "nft"
    log.info("iptables backend %s (rules present: legacy=%s nft=%s)", choice, legacy, nft)
    return choice


@dataclass(frozen=True, slots=True)
class IptablesCommands:
    """The save/restore commands of one backend and IP version."""

    save: tuple[str, ...]
    restore: tuple[str, ...]

    @classmethod
    def for_backend(cls, backend: str, version: int) -> IptablesCommands:
        base = "iptables" if version == 4 else "ip6tables"
        mode = f"-{backend}" if backend in ("legacy", "nft") else ""
        return cls(
            save=(f"{base}{mode}-save",),
            restore=(f"{base}{mode}-restore", "--noflush", "--wait", "10"),
        )


def read_counters(
    commands: IptablesCommands, netns: str | None, *, timeout: float, table: str = "filter"
) -> str:
    """``iptables-save -c -t TABLE``, blocking (for a thread off the main loop).

    Raises:
        ProgrammingError: the tool could not run, timed out or failed.
    """
    argv = [*commands.save, "-c", "-t", table]
    result = run_sync(argv, netns, timeout=timeout)
    if result.returncode != 0:
        stderr = result.stderr.decode(errors="replace").strip().replace("\n", " | ")
        raise ProgrammingError(f"{' '.join(argv)}: exit {result.returncode}: {stderr[:300]}")
    return result.stdout.decode(errors="replace")
