"""Choosing between iptables and native nftables: Felix's ``NFTablesMode``.

``disabled`` programs iptables (and ipset), ``enabled`` native nftables.
``auto`` picks nftables where the kernel has nf_tables (``nft list
tables`` works) and no iptables chain of ours is present in either
iptables backend: a node that ran on iptables stays there until an
operator says otherwise, rather than switching under live traffic
because the driver was upgraded. The choice is made once, at start, as
Felix restarts to change it; whichever backend is chosen, the platform
then removes the other's objects of ours (see
:meth:`dataplane.linux.programmers.Programmers.start`).
"""

from __future__ import annotations

import logging
import shutil

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import CommandRunner

__all__ = ["MODES", "nftables_chosen"]

log = logging.getLogger(__name__)

MODES = ("disabled", "enabled", "auto")


async def _nf_tables(runner: CommandRunner) -> str:
    """Why nftables cannot be used here, or "" if it can."""
    if shutil.which("nft") is None:
        return "nft is not installed"
    result = await runner.run(["nft", "list", "tables"], check=False)
    if result.returncode != 0:
        lines = result.stderr.decode(errors="replace").strip().splitlines()
        return f"nft list tables: exit {result.returncode}: {lines[-1] if lines else ''}"
    return ""


async def _iptables_chains_of_ours(runner: CommandRunner, prefix: str) -> list[str]:
    """The iptables tools (``iptables-nft-save``...) that hold a chain named ``prefix...``."""
    declared = f":{prefix}".encode()
    found = []
    for mode in ("legacy", "nft"):
        for base in ("iptables", "ip6tables"):
            binary = f"{base}-{mode}-save"
            if shutil.which(binary) is None:
                continue
            result = await runner.run([binary], check=False)
            if result.returncode == 0 and any(
                line.startswith(declared) for line in result.stdout.splitlines()
            ):
                found.append(binary)
    return found


async def nftables_chosen(runner: CommandRunner, mode: str, prefix: str) -> bool:
    """True to program native nftables, False for iptables.

    Raises:
        ProgrammingError: ``enabled`` where nftables cannot be used.
    """
    if mode == "disabled":
        return False
    why_not = await _nf_tables(runner)
    if mode == "enabled":
        if why_not:
            raise ProgrammingError(f"NFTablesMode=Enabled, but {why_not}")
        return True
    if why_not:
        log.info("NFTablesMode=Auto: iptables (%s)", why_not)
        return False
    holders = await _iptables_chains_of_ours(runner, prefix)
    if holders:
        log.info("NFTablesMode=Auto: iptables (chains of ours in %s)", ", ".join(holders))
        return False
    log.info("NFTablesMode=Auto: nftables")
    return True
