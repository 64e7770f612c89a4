"""Finding the chains the kernel refuses, without writing anything.

When a table's atomic restore fails, iptables names a line but not which
of our objects is at fault, and nothing of the batch was written. The
:class:`ChainChecker` asks the kernel's own parser (``iptables-restore
--test``, which never commits) about subsets of the chains the batch would
have written, halving the suspects each time, until every chain that is
refused on its own is found: about ``2·k·log2(n)`` parser runs for ``k``
bad chains among ``n``, paid only when a write failed.

Each tested subset declares the chains it references but does not contain
(empty, in the test only), so a chain is judged on its own rules and never
on whether its neighbours exist yet. A refusal that no subset reproduces
(one only the kernel's commit catches, such as a loop on the nft backend)
finds nothing, and the caller treats the failure as it always did: the
whole table is retried.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dataplane.errors import ProgrammingError
from dataplane.linux.iptables.chains import IptRule, render_rule, rule_hash_of
from dataplane.linux.kernel.cmd import CommandRunner

__all__ = ["ChainChecker", "RefusedChain", "failed_line"]

_ERROR_LINE = re.compile(r"line:? (\d+)")
_JUMP = re.compile(r"(?:^|\s)-[jg] (\S+)")


@dataclass(frozen=True, slots=True)
class RefusedChain:
    """A chain the kernel's parser refuses on its own.

    Attributes:
        chain: its name.
        rule_index: zero-based index of the refused rule in the chain, when
            the parser named a line inside it.
        message: the parser's own words (first line of its complaint).
    """

    chain: str
    rule_index: int | None
    message: str


@dataclass(frozen=True, slots=True)
class ChainChecker:
    """Bisects a set of chains with ``<restore> --test``.

    Args:
        table: iptables table name.
        restore: the restore command (as the table writes with it).
        runner: runs it.
        prefix: our chain prefix; jumps to such chains outside a subset are
            declared so the subset stands alone.
    """

    table: str
    restore: tuple[str, ...]
    runner: CommandRunner
    prefix: str

    async def refused(
        self, chains: Mapping[str, tuple[tuple[IptRule, ...], list[str]]]
    ) -> list[RefusedChain]:
        """Every chain of ``chains`` (name -> (rules, hashes)) refused alone."""
        found: list[RefusedChain] = []
        await self._bisect(sorted(chains), chains, found)
        return found

    async def _bisect(
        self,
        names: Sequence[str],
        chains: Mapping[str, tuple[tuple[IptRule, ...], list[str]]],
        found: list[RefusedChain],
    ) -> None:
        if not names:
            return
        problem = await self._test(names, chains)
        if problem is None:
            return
        if len(names) == 1:
            found.append(problem)
            return
        half = len(names) // 2
        await self._bisect(names[:half], chains, found)
        await self._bisect(names[half:], chains, found)

    async def _test(
        self,
        names: Sequence[str],
        chains: Mapping[str, tuple[tuple[IptRule, ...], list[str]]],
    ) -> RefusedChain | None:
        inside = set(names)
        referenced: set[str] = set()
        for name in names:
            for rule in chains[name][0]:
                jump = _JUMP.search(rule.action)
                if jump and jump.group(1).startswith(self.prefix):
                    referenced.add(jump.group(1))
        declared = [*names, *sorted(referenced - inside)]
        lines = [f"*{self.table}", *(f":{n} - [0:0]" for n in declared)]
        first_rule_line = len(lines) + 1
        for name in names:
            rules, hashes = chains[name]
            lines.extend(render_rule(name, r, h) for r, h in zip(rules, hashes, strict=True))
        lines += ["COMMIT", ""]
        try:
            result = await self.runner.run(
                [*self.restore, "--test"], stdin="\n".join(lines).encode(), check=False
            )
        except ProgrammingError as exc:  # the tool itself could not run
            return RefusedChain(names[0], None, str(exc)) if len(names) == 1 else None
        if result.returncode == 0:
            return None
        message = _first_line(result.stderr)
        rule_index = None
        if len(names) == 1:
            where = failed_line(result.stderr.decode(errors="replace"))
            if where is not None:
                index = where[0] - first_rule_line
                if 0 <= index < len(chains[names[0]][0]):
                    rule_index = index
        return RefusedChain(names[0], rule_index, message)


def refusal_at(
    error: str, lines: Sequence[str], hashes: Mapping[str, Sequence[str]]
) -> RefusedChain | None:
    """The chain whose rule is on the restore input line a failed commit names.

    ``hashes`` are the wanted chains with their rule hashes; None if the
    error names no line, or a line that is not a rule of a wanted chain.
    """
    where = failed_line(error)
    if where is None or not 0 < where[0] <= len(lines):
        return None
    line = lines[where[0] - 1]
    words = line.split()
    if len(words) < 2 or words[0] not in ("-A", "-I") or words[1] not in hashes:
        return None
    chain = words[1]
    tag = rule_hash_of(line)
    index = hashes[chain].index(tag) if tag in hashes[chain] else None
    return RefusedChain(chain, index, where[1][:300])


def failed_line(message: str) -> tuple[int, str] | None:
    """The input line a restore's complaint names, and the complaint from there.

    Both backends say "line N" ("Error occurred at line: N" for parse
    errors, "line N: RULE_APPEND failed ..." for nft commit errors).
    """
    where = _ERROR_LINE.search(message)
    return None if where is None else (int(where.group(1)), message[where.start() :])


def _first_line(stderr: bytes) -> str:
    for raw in stderr.decode(errors="replace").splitlines():
        line = raw.strip()
        if line and not line.startswith(("Error occurred", "Try `")):
            return line[:300]
    return "refused (no message)"
