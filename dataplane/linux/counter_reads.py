"""Reading the kernel's per-rule counters, for whichever backend programs the node.

What :mod:`dataplane.ops.policy_counters` calls, off the main loop: the
filter table's counters saved (``iptables-save -c``, or our nftables table
listed) and parsed into (chain, rule hash, packets, bytes). nftables'
reader and parser are imported where they are used: a node on iptables
never loads nftables' modules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from dataplane.linux.iptables.backend import IptablesCommands, read_counters
from dataplane.linux.iptables.chains import parse_counters
from dataplane.linux.programmers import Programmers

__all__ = ["counter_reads"]

Save = Callable[[int], str]
Parse = Callable[[str], Iterable[tuple[str, str, int, int]]]


def counter_reads(
    kernel: Callable[[], Programmers | None], netns: str | None, timeout: float
) -> tuple[Save, Parse]:
    """(save, parse) for the programmers ``kernel`` returns (None before the
    first apply: nothing to read), in namespace ``netns``.

    Blocking, for a thread: each save runs a tool with ``timeout``.
    """

    def save(version: int) -> str:
        programmers = kernel()  # set once, at the first apply
        if programmers is None:
            return ""
        nft = programmers.nft.get(version)
        if nft is not None:
            from dataplane.linux.nftables.counters import read_table  # noqa: PLC0415

            return read_table(nft.family, nft.name, netns, timeout=timeout)
        commands = IptablesCommands.for_backend(programmers.backend, version)
        return read_counters(commands, netns, timeout=timeout)

    def parse(text: str) -> Iterable[tuple[str, str, int, int]]:
        programmers = kernel()
        if programmers is not None and programmers.nftables:
            from dataplane.linux.nftables.counters import parse_counters as parse_nft  # noqa: PLC0415

            return parse_nft(text, "filter")
        return parse_counters(text)

    return save, parse
