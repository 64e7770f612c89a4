"""iptables values and the save-format parser.

A rendered chain is a frozen :data:`IptChain` of :class:`IptRule` values;
renderers return them and the :mod:`~dataplane.linux.iptables.table` programmer
writes them. Every rule we write carries a comment ``cali:<hash>`` whose
hash covers the chain name, the rule's text and the previous rule's hash,
so comparing two lists of hashes tells whether a chain in the kernel is
exactly what we want -- without comparing rule text, which iptables-save
prints back in its own canonical form.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from dataplane.linux.rules.chain import Chain
from dataplane.linux.rules.comment import safe_comment
from dataplane.linux.rules.identity import HASH_TAG, chain_hashes
from dataplane.linux.rules.rule import Origin

__all__ = [
    "IptChain",
    "IptRule",
    "SavedChain",
    "SavedTable",
    "parse_counters",
    "parse_save",
    "rule_hashes",
]

_COUNTED_RULE = re.compile(r"\[(\d+):(\d+)\] -A (\S+) ")
_COMMENT_RE = re.compile(r'--comment "?' + re.escape(HASH_TAG) + r'([A-Za-z0-9_-]{16})"?')


@dataclass(frozen=True, slots=True)
class IptRule:
    """One rule: match criteria and an action, in iptables syntax."""

    match: str = ""
    action: str = ""
    comment: str = ""  # for people reading iptables-save; not part of identity
    # Where the rule came from (see the rule model); not written to the
    # kernel, but part of equality so a table notices an origin-only change.
    origin: Origin | None = None
    counts: bool = False

    def text(self) -> str:
        return f"{self.match} {self.action}".strip()


# An iptables chain: its rules in iptables syntax.
IptChain = Chain[IptRule]


def rule_hashes(chain: str, rules: Iterable[IptRule]) -> list[str]:
    """Position-dependent hashes of a chain's rules (Felix's scheme)."""
    return chain_hashes(chain, (rule.text() for rule in rules))


def rule_hash_of(line: str) -> str | None:
    """The hash comment of one saved or restore rule line; None if it has none."""
    match = _COMMENT_RE.search(line)
    return match.group(1) if match else None


def render_rule(
    chain: str, rule: IptRule, rule_hash: str, verb: str = "-A", position: int | None = None
) -> str:
    """One ``iptables-restore`` line for ``rule`` with its hash comment."""
    parts = [verb, chain] if position is None else [verb, chain, str(position)]
    parts += ["-m", "comment", "--comment", f'"{HASH_TAG}{rule_hash}"']
    if rule.comment:
        parts += ["-m", "comment", "--comment", _quote(rule.comment)]
    text = rule.text()
    if text:
        parts.append(text)
    return " ".join(parts)


def _quote(text: str) -> str:
    return '"' + safe_comment(text) + '"'


@dataclass(slots=True)
class SavedChain:
    """A chain as iptables-save printed it."""

    name: str
    lines: list[str] = field(default_factory=list)  # full "-A name ..." lines
    hashes: list[str | None] = field(default_factory=list)  # our hash per rule, else None


@dataclass(slots=True)
class SavedTable:
    name: str
    chains: dict[str, SavedChain] = field(default_factory=dict)


def parse_save(text: str | Iterable[str]) -> dict[str, SavedTable]:
    """Parse ``iptables-save`` output into tables, chains and rule hashes.

    Tolerant by design: comment lines, counters and unknown lines are
    skipped, so a newer iptables printing something extra cannot break the
    driver's view of its own chains.
    """
    tables: dict[str, SavedTable] = {}
    table: SavedTable | None = None
    for raw in text.splitlines() if isinstance(text, str) else text:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("*"):
            table = tables.setdefault(line[1:], SavedTable(line[1:]))
        elif table is None:
            continue
        elif line.startswith(":"):
            name = line[1:].split(" ", 1)[0]
            table.chains.setdefault(name, SavedChain(name))
        elif line.startswith("-A "):
            name = line.split(" ", 2)[1]
            chain = table.chains.setdefault(name, SavedChain(name))
            chain.lines.append(line)
            chain.hashes.append(rule_hash_of(line))
    return tables


def parse_counters(text: str) -> Iterator[tuple[str, str, int, int]]:
    """(chain, rule hash, packets, bytes) of each of our rules in ``iptables-save -c``.

    Both backends print a rule's counters before it (``[packets:bytes] -A
    chain ...``); rules without our hash comment are skipped, as is
    anything else the tool prints.
    """
    for line in text.splitlines():
        counted = _COUNTED_RULE.match(line)
        if counted is None:
            continue
        rule_hash = rule_hash_of(line)
        if rule_hash is not None:
            yield counted.group(3), rule_hash, int(counted.group(1)), int(counted.group(2))
