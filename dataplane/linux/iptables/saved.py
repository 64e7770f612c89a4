"""What of ours an ``iptables-save`` holds, and the lines that bring our
hook rules in a built-in chain to what is wanted. Pure.

Our chains are found by their prefix and compared by the rule hashes in
their comments; in a built-in chain only the rules with our hash are
ours (anyone else's are never touched).
"""

from __future__ import annotations

from collections.abc import Sequence

from dataplane.linux.iptables.chains import IptRule, parse_save, render_rule, rule_hashes
from dataplane.linux.kernel.cmd import output_lines

__all__ = ["BUILTIN_CHAINS", "hook_lines", "saved_chains"]

BUILTIN_CHAINS = {
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
    "raw": ("PREROUTING", "OUTPUT"),
}


def saved_chains(
    table: str, prefix: str, saved_text: bytes
) -> tuple[dict[str, list[str | None]], dict[str, list[tuple[str | None, str]]]]:
    """Our chains (name -> rule hashes) and our hook rules (built-in chain ->
    (hash, line)) in ``iptables-save -t table`` output."""
    saved = parse_save(output_lines(saved_text)).get(table)
    chains: dict[str, list[str | None]] = {}
    hooks: dict[str, list[tuple[str | None, str]]] = {}
    for chain in saved.chains.values() if saved else ():
        if chain.name.startswith(prefix):
            chains[chain.name] = list(chain.hashes)
        elif chain.name in BUILTIN_CHAINS.get(table, ()):
            ours: list[tuple[str | None, str]] = [
                (h, line) for h, line in zip(chain.hashes, chain.lines, strict=True) if h
            ]
            if ours:
                hooks[chain.name] = ours
    return chains, hooks


def hook_lines(
    builtin: str,
    held: Sequence[tuple[str | None, str]],
    wanted: Sequence[IptRule],
    *,
    insert: bool,
) -> list[str]:
    """Restore lines replacing our rules in ``builtin`` (``held``, as
    :func:`saved_chains` found them) with ``wanted``: each held one deleted
    by its line, the wanted ones inserted at the top (``insert``, Felix's
    ChainInsertMode) or appended."""
    hashes = rule_hashes(builtin, wanted)
    lines = ["-D" + line[2:] for _, line in held]
    if insert:
        pairs = enumerate(zip(wanted, hashes, strict=True), start=1)
        lines += [render_rule(builtin, r, h, verb="-I", position=i) for i, (r, h) in pairs]
    else:
        lines += [render_rule(builtin, r, h) for r, h in zip(wanted, hashes, strict=True)]
    return lines
