"""The kernel's per-rule counters of one iptables table's share of our nft table.

Every rule we write to nftables carries a ``counter`` (as every iptables
rule has one) and its identity in its comment (``cali:<hash>``). The
policy counters (:mod:`dataplane.ops.policy_counters`) read them the way
they read ``iptables-save -c``: ``nft list table`` in the metrics
server's thread, parsed into (chain, rule hash, packets, bytes), chains
named as the iptables table names them (``filter-cali-pi-x`` is
``cali-pi-x``), so one label map serves both backends.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import run_sync
from dataplane.linux.nftables.listing import RULE_HASH

__all__ = ["parse_counters", "read_table"]

_COUNTER = re.compile(r"\bcounter packets (\d+) bytes (\d+)")


def read_table(family: str, table: str, netns: str | None, *, timeout: float) -> str:
    """``nft list table FAMILY TABLE``, blocking (for a thread off the main loop).

    Raises:
        ProgrammingError: nft could not run, timed out or failed.
    """
    argv = ["nft", "list", "table", family, table]
    result = run_sync(argv, netns, timeout=timeout)
    if result.returncode != 0:
        stderr = result.stderr.decode(errors="replace").strip().replace("\n", " | ")
        raise ProgrammingError(f"{' '.join(argv)}: exit {result.returncode}: {stderr[:300]}")
    return result.stdout.decode(errors="replace")


def parse_counters(text: str, view: str = "filter") -> Iterator[tuple[str, str, int, int]]:
    """(chain, rule hash, packets, bytes) of each of our rules in ``view``'s
    chains of an ``nft list table`` listing; chains by their iptables name.

    nft puts each chain's header one tab in and each of its rules on one
    line two tabs in; rules without our hash comment or a counter are
    skipped, as are other tables' chains.
    """
    prefix = f"{view}-"
    chain: str | None = None
    for line in text.splitlines():
        if line.startswith("\tchain "):
            name = line.split()[1]
            chain = name.removeprefix(prefix) if name.startswith(prefix) else None
        elif not line.startswith("\t\t"):
            chain = None
        elif chain is not None:
            counted = _COUNTER.search(line)
            found = RULE_HASH.search(line)
            if counted and found:
                yield chain, found.group(1), int(counted.group(1)), int(counted.group(2))
