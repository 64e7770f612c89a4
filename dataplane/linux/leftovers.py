"""Objects of ours left in the kernel by a backend not in use, removed.

After a switch of ``NFTablesMode`` the other backend's chains, sets and
tables would still judge every packet; at a cleanup both backends' go.
Each helper looks before it writes, cheaply: a node that never ran the
other backend pays a few reads and no write.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Sequence

from dataplane.linux.ipsets.programmer import IPSetsProgrammer
from dataplane.linux.iptables.backend import IptablesCommands
from dataplane.linux.iptables.saved import saved_chains
from dataplane.linux.iptables.table import Table
from dataplane.linux.kernel.cmd import CommandRunner
from dataplane.linux.kernel.side_by_side import side_by_side
from dataplane.linux.nftables.names import nft_tables
from dataplane.linux.writers.shapes import TABLES

__all__ = ["remove_ipsets", "remove_iptables", "remove_nftables"]


async def remove_iptables(runner: CommandRunner, prefix: str, backends: Sequence[str]) -> None:
    """Our chains and hook rules in every listed iptables backend installed.

    One save of every table per backend and IP version says which tables
    hold anything of ours; only those are read again and written (on a
    node that never ran the other backend: four saves, no restore). The
    four are side by side: each is its own backend's and version's.
    """

    async def one(backend: str, version: int) -> None:
        commands = IptablesCommands.for_backend(backend, version)
        listing = (await runner.run(commands.save)).stdout
        for name in TABLES:
            if any(saved_chains(name, prefix, listing)):
                table = Table(name, version, runner, commands, prefix=prefix)
                await table.cleanup_all()

    await side_by_side(
        *(
            functools.partial(one, backend, version)
            for backend in backends
            if shutil.which(f"iptables-{backend}-save") is not None
            for version in (4, 6)
        )
    )


async def remove_ipsets(runner: CommandRunner) -> None:
    """Our ipset sets, where ipset is installed (on nftables, the other backend's)."""
    if shutil.which("ipset") is not None:
        await IPSetsProgrammer(runner, ipv6=True).cleanup_all()


async def remove_nftables(runner: CommandRunner, prefix: str) -> None:
    """Our nftables tables (rules, sets, services), where nft is installed.

    Each looked for by name first, then only those present deleted, in
    one transaction. ``nft`` reads what a command names before it runs
    it: a delete of a table that is not there fails after 15 ms, but a
    listing of every table reads every rule of every table, iptables-nft's
    included (3 s on a node of 86,000 such rules); one table by name that
    is not there is 6 ms, and the four looks are side by side.
    """
    if shutil.which("nft") is None:
        return
    names = nft_tables(prefix)
    wanted = [(f, t) for f in ("ip", "ip6") for t in (names.main, names.services)]
    found: dict[tuple[str, str], bool] = {}

    async def look(family: str, table: str) -> None:
        listed = await runner.run(["nft", "list", "table", family, table], check=False)
        found[(family, table)] = listed.returncode == 0

    await side_by_side(*(functools.partial(look, f, t) for f, t in wanted))
    present = [name for name in wanted if found[name]]
    if present:
        script = "".join(f"delete table {family} {table}\n" for family, table in present)
        await runner.run(["nft", "-f", "-"], stdin=script.encode())
