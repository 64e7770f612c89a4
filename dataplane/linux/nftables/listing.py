"""What nft prints, read: our rules in ``nft -a list table`` output, found
by their hash comment, and which line of a script nft refused. Pure.

The refresher compares our chains with the kernel's by these hashes, and
the policy counters find each rule of ours by its hash; a refused
script's line names the chain to quarantine.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from dataplane.linux.kernel.cmd import output_lines
from dataplane.linux.rules.identity import HASH_TAG

__all__ = ["RULE_HASH", "blame", "listed_chains"]

# Our identity tag in a listed rule's comment (its hash: group 1).
RULE_HASH = re.compile(r'comment "' + re.escape(HASH_TAG) + r"([A-Za-z0-9_-]{16})")
_HANDLE = re.compile(r" # handle \d+$")
# Where nft places an error in a script read from stdin: its line (group 1).
_WHERE = re.compile(r"^(?:/dev/stdin|-):(\d+):[\d-]+: ")


def listed_chains(listing: bytes) -> dict[str, list[str | None]]:
    """chain -> our rule hashes (None for a rule without our tag), from
    ``nft -a list table``.

    The text listing, not ``-j``: Python walks it line by line, so the loop
    thread gets the interpreter every few milliseconds while a worker
    parses; ``json.loads`` of a large table holds it throughout. nft puts a
    table's blocks (chains, sets) one tab in and each rule of a chain on one
    line two tabs in, ending with its ``# handle``; a base chain's hook line
    has none.
    """
    chains: dict[str, list[str | None]] = {}
    current: list[str | None] | None = None
    for raw in output_lines(listing):
        line = raw.rstrip("\n")
        if line.startswith("\t\t"):
            if current is not None and _HANDLE.search(line):
                found = RULE_HASH.search(line)
                current.append(found.group(1) if found else None)
        elif line.startswith("\tchain "):
            current = chains.setdefault(line.split()[1], [])
        elif line.startswith("\t"):
            current = None  # a set, a map, or a block's end
    return chains


def blame(
    stderr: bytes, script: Sequence[tuple[str, str | None]]
) -> tuple[str, str | None, int | None]:
    """nft's first complaint about ``script`` (lines, and the chain each
    writes), the chain whose line it names and which of that chain's rules
    the line writes (None: not a rule)."""
    lines = stderr.decode(errors="replace").strip().splitlines()
    message = lines[0] if lines else "refused"
    for line in lines:
        found = _WHERE.match(line)
        if found and 0 < int(found.group(1)) <= len(script):
            at = int(found.group(1)) - 1
            refused, chain = script[at]
            why = line[found.end() :].strip().removeprefix("Error: ")
            rule = None
            if refused.startswith("add rule "):
                rule = sum(
                    1 for text, c in script[:at] if c == chain and text.startswith("add rule ")
                )
            return f"{why}: {refused[:200]}", chain, rule
    return message, None, None
