"""FakeIptables: the iptables save and restore tools over in-memory tables.

:class:`FakeIptables` is a :class:`~dataplane.linux.kernel.cmd.CommandRunner`
that answers ``ip[6]tables[-legacy|-nft]-save`` and ``-restore`` from
tables it keeps in memory, so a :class:`~dataplane.linux.iptables.table.Table`
(and whatever drives one) runs without root and without a kernel. What it
models, as both real backends behave (``tests/linux/test_iptables_contract.py``
holds it to the real tools):

* tables ``filter``, ``nat``, ``mangle`` and ``raw`` per IP version, their
  built-in chains with policy ``ACCEPT``;
* a restore is all or nothing per ``COMMIT``: the first refused line
  leaves that table as it was and the exit status non-zero, naming the
  line (``line N``) as both tools do;
* without ``--noflush`` every table in the input is flushed first (rules
  gone, user chains deleted; nft also sets the built-in chains' policies
  back to ``ACCEPT``, legacy keeps them); with it, a
  ``:CHAIN`` line creates a user chain or flushes one that exists, and on a
  built-in chain only sets its policy;
* ``-A``, ``-I CHAIN [N]``, ``-D CHAIN RULE`` / ``-D CHAIN N``, ``-R``,
  ``-F [CHAIN]``, ``-X [CHAIN]``, ``-N``, ``-P``; a rule may only be added to
  a chain that exists and only jump (``-j``/``-g``) to a chain that exists
  or to a standard target; a chain is deleted only when empty and no rule
  refers to it;
* ``--test`` writes nothing; legacy judges the lines as a restore would,
  nft only parses them (a missing chain passes its ``--test`` and fails its
  commit); ``save -c`` prints ``[0:0]`` counters.

The backend is the one the tool's name says (``iptables-nft-restore``);
plain ``iptables-restore`` answers as legacy.

What it does not model: the parsing of matches. A rule is kept as the text
it was written in, so a rule is found again (``-D``) only by that text, and
a caller that wants ``save`` to print what the real tools print writes
rules in their canonical form (``-s 10.0.0.1/32``, ``-p tcp -m tcp
--dport 80``). The kernel's own parser is what judges rule text: the
renderers' output goes through ``iptables-restore --test`` in the
kernel-parser property tests.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from dataplane.linux.kernel.cmd import CommandResult, check_exit

__all__ = ["BUILTIN_CHAINS", "STANDARD_TARGETS", "FakeIptables", "FakeTable"]

BUILTIN_CHAINS: dict[str, tuple[str, ...]] = {
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
    "raw": ("PREROUTING", "OUTPUT"),
}
# Targets that are not chains: verdicts and the extensions the driver uses.
STANDARD_TARGETS = frozenset(
    {
        "ACCEPT", "DROP", "RETURN", "QUEUE", "REJECT", "LOG", "MARK", "CONNMARK",
        "MASQUERADE", "SNAT", "DNAT", "REDIRECT", "NOTRACK", "CT", "TCPMSS", "NFLOG",
    }
)  # fmt: skip
_TOOL = re.compile(r"^ip(6?)tables(?:-(legacy|nft))?-(save|restore)$")
_JUMP = re.compile(r"(?:^|\s)-[jg]\s+(\S+)")


@dataclass(slots=True)
class FakeTable:
    """One table of one IP version: chain -> rules (as written), and policies."""

    name: str
    chains: dict[str, list[str]] = field(default_factory=dict)
    policies: dict[str, str] = field(default_factory=dict)

    @classmethod
    def empty(cls, name: str) -> FakeTable:
        builtins = BUILTIN_CHAINS[name]
        return cls(name, {c: [] for c in builtins}, dict.fromkeys(builtins, "ACCEPT"))


class _RefusedError(Exception):
    """One restore line the tool refuses, and why: against the tables' state."""


class _ParseError(_RefusedError):
    """A line the tool's parser refuses on its own (also under ``--test``)."""


class FakeIptables:
    """The save and restore tools of both IP versions, over tables in memory.

    ``calls`` counts every command run by tool name (observability for
    tests: a restart onto a correct ruleset makes no restore).
    """

    def __init__(self) -> None:
        self.tables: dict[int, dict[str, FakeTable]] = {
            version: {name: FakeTable.empty(name) for name in BUILTIN_CHAINS} for version in (4, 6)
        }
        self.calls: dict[str, int] = {}

    # --- CommandRunner --------------------------------------------------------------

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        result = self.run_sync(argv, stdin=stdin)
        if check:
            check_exit(argv, result)
        return result

    def run_sync(self, argv: Sequence[str], *, stdin: bytes | None = None) -> CommandResult:
        match = _TOOL.match(argv[0].rsplit("/", 1)[-1])
        # The backend in the tool's name; plain ``iptables-*`` is legacy here.
        if match is None:
            return CommandResult(127, b"", f"{argv[0]}: command not found\n".encode())
        self.calls[argv[0]] = self.calls.get(argv[0], 0) + 1
        version = 6 if match.group(1) else 4
        args = list(argv[1:])
        if match.group(3) == "save":
            return self._save(version, args)
        nft = match.group(2) == "nft"
        return self._restore(version, args, (stdin or b"").decode(), nft=nft)

    # --- save -------------------------------------------------------------------------

    def _save(self, version: int, args: list[str]) -> CommandResult:
        counters = "-c" in args or "--counters" in args
        only = args[args.index("-t") + 1] if "-t" in args else None
        if only is not None and only not in BUILTIN_CHAINS:
            return CommandResult(1, b"", f"iptables-save: no table {only!r}\n".encode())
        out = []
        for name in BUILTIN_CHAINS if only is None else (only,):
            out.extend(self.save_lines(version, name, counters=counters))
        return CommandResult(0, "".join(f"{line}\n" for line in out).encode(), b"")

    def save_lines(self, version: int, name: str, *, counters: bool = False) -> list[str]:
        """The table as ``save`` prints it: built-ins in kernel order, then user chains by name."""
        table = self.tables[version][name]
        builtins = BUILTIN_CHAINS[name]
        users = sorted(c for c in table.chains if c not in builtins)
        lines = ["# Generated by the iptables fake", f"*{name}"]
        lines += [f":{c} {table.policies[c]} [0:0]" for c in builtins]
        lines += [f":{c} - [0:0]" for c in users]
        for chain in (*builtins, *users):
            prefix = "[0:0] " if counters else ""
            lines += [f"{prefix}-A {chain} {rule}".rstrip() for rule in table.chains[chain]]
        return [*lines, "COMMIT", "# Completed"]

    # --- restore ----------------------------------------------------------------------

    def _restore(self, version: int, args: list[str], text: str, *, nft: bool) -> CommandResult:
        noflush = "--noflush" in args or "-n" in args
        test = "--test" in args or "-t" in args
        # iptables-nft-restore --test only parses: whether chains exist, rules
        # match or chains are in use is the kernel's to judge at the commit.
        parse_only = test and nft
        tables = self.tables[version]
        work: FakeTable | None = None
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            try:
                if line.startswith("*"):
                    if work is not None:
                        raise _RefusedError("a table opened before the last one's COMMIT")
                    name = line[1:]
                    if name not in BUILTIN_CHAINS:
                        raise _RefusedError(f"table '{name}' does not exist")
                    work = copy.deepcopy(tables[name])
                    if not noflush:
                        # Flushed: rules and user chains gone; nft flushes the
                        # table's base chains' policies too, legacy keeps them.
                        policies = FakeTable.empty(name).policies if nft else work.policies
                        work = FakeTable(name, {c: [] for c in BUILTIN_CHAINS[name]}, policies)
                elif work is None:
                    raise _RefusedError("no table opened")
                elif line == "COMMIT":
                    if not test:
                        tables[work.name] = work
                    work = None
                else:
                    try:
                        _apply(work, line)
                    except _ParseError:
                        raise
                    except _RefusedError:
                        if not parse_only:
                            raise
            except _RefusedError as exc:
                message = f"iptables-restore: line {number} failed: {exc}\n"
                return CommandResult(1, b"", message.encode())
        if work is not None:
            return CommandResult(1, b"", b"iptables-restore: COMMIT expected at the end\n")
        return CommandResult(0, b"", b"")


def _apply(table: FakeTable, line: str) -> None:
    """One restore line on ``table`` (a working copy); raises _RefusedError."""
    builtins = BUILTIN_CHAINS[table.name]
    if line.startswith(":"):
        words = line[1:].split()
        chain, policy = words[0], words[1] if len(words) > 1 else "-"
        if chain in builtins:
            table.policies[chain] = "ACCEPT" if policy == "-" else policy
        elif policy != "-":
            raise _RefusedError(f"a user chain cannot have a policy: {chain}")
        else:
            table.chains[chain] = []  # created, or flushed (--noflush keeps others)
        return
    words = line.split()
    if words[0] in ("-A", "-I", "-D", "-R", "-N", "-P") and len(words) < 2:
        raise _ParseError(f"option {words[0]!r} requires an argument")
    verb, rest = words[0], line.split(None, 1)[1] if len(words) > 1 else ""
    chain = words[1] if len(words) > 1 else ""
    if verb in ("-A", "-I", "-D", "-R") and chain not in table.chains:
        raise _RefusedError(f"No chain/target/match by that name: {chain}")
    if verb == "-A":
        table.chains[chain].append(_rule(table, rest.split(None, 1)))
    elif verb == "-I":
        position, spec = _position(rest.split(None, 1))
        rules = table.chains[chain]
        if not 1 <= position <= len(rules) + 1:
            raise _RefusedError(f"index of insertion too big: {position}")
        rules.insert(position - 1, _rule(table, [chain, spec]))
    elif verb in ("-D", "-R"):
        _delete_or_replace(table, verb, chain, rest)
    elif verb == "-F":
        for name in [chain] if chain else list(table.chains):
            if name not in table.chains:
                raise _RefusedError(f"No chain/target/match by that name: {name}")
            table.chains[name] = []
    elif verb == "-X":
        for name in [chain] if chain else [c for c in table.chains if c not in builtins]:
            _delete_chain(table, name)
    elif verb == "-N":
        if not chain or chain in table.chains:
            raise _RefusedError(f"Chain already exists: {chain}")
        table.chains[chain] = []
    elif verb == "-P":
        if chain not in builtins or len(words) != 3:
            raise _RefusedError(f"bad policy: {line}")
        table.policies[chain] = words[2]
    else:
        raise _ParseError(f"unknown command {verb!r}")


def _rule(table: FakeTable, chain_and_spec: list[str]) -> str:
    """The rule text after ``-A CHAIN``, checked that its jump lands somewhere."""
    spec = chain_and_spec[1] if len(chain_and_spec) > 1 else ""
    for target in _JUMP.findall(" " + spec):
        if target not in STANDARD_TARGETS and target not in table.chains:
            raise _RefusedError(f"Chain '{target}' does not exist")
        if target in BUILTIN_CHAINS[table.name]:
            raise _RefusedError(f"cannot jump to a built-in chain: {target}")
    return spec


def _position(chain_and_rest: list[str]) -> tuple[int, str]:
    rest = chain_and_rest[1] if len(chain_and_rest) > 1 else ""
    first, _, spec = rest.partition(" ")
    return (int(first), spec) if first.isdigit() else (1, rest)


def _delete_or_replace(table: FakeTable, verb: str, chain: str, rest: str) -> None:
    rules = table.chains[chain]
    spec = rest.split(None, 1)[1] if len(rest.split(None, 1)) > 1 else ""
    first, _, replacement = spec.partition(" ")
    if first.isdigit():
        index = int(first) - 1
        if not 0 <= index < len(rules):
            raise _RefusedError("Index of deletion too big")
    elif verb == "-D" and spec in rules:
        index = rules.index(spec)
    else:
        raise _RefusedError("Bad rule (does a matching rule exist in that chain?)")
    if verb == "-D":
        del rules[index]
    else:
        rules[index] = _rule(table, [chain, replacement])


def _delete_chain(table: FakeTable, name: str) -> None:
    if name in BUILTIN_CHAINS[table.name]:
        raise _RefusedError(f"cannot delete a built-in chain: {name}")
    if name not in table.chains:
        raise _RefusedError(f"No chain/target/match by that name: {name}")
    if table.chains[name]:
        raise _RefusedError(f"CHAIN_DEL failed (busy): chain {name} is not empty")
    for other, rules in table.chains.items():
        if any(name in _JUMP.findall(" " + rule) for rule in rules):
            raise _RefusedError(f"CHAIN_DEL failed (busy): {other} jumps to {name}")
    del table.chains[name]
