"""The iptables fake keeps the contract of the real tools, legacy and nft.

Every case runs the same restores on ``iptables-legacy``, ``iptables-nft``
(each in a throwaway namespace; root only) and on
:class:`tests.linux.fake_iptables.FakeIptables`, and checks each against the same
expectations: which restores succeed, what ``save`` shows after (policies
and every chain's rules, in order), and that a refused restore names a line
and changes nothing. Rules are written in the form ``save`` prints them
(the fake keeps rule text as written; see its docstring).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator

import pytest

from dataplane.linux.iptables.chain_check import failed_line
from dataplane.linux.iptables.chains import parse_save
from dataplane.linux.kernel.cmd import CommandResult
from tests.linux.fake_iptables import FakeIptables

Run = Callable[[list[str], str], CommandResult]
State = dict[str, tuple[str, tuple[str, ...]]]  # chain -> (policy or "-", rules)


@pytest.fixture(params=["legacy", "nft", "fake-legacy", "fake-nft"])
def tool(request: pytest.FixtureRequest) -> Iterator[tuple[str, Run]]:
    """(backend for the commands' names, run argv with stdin)."""
    if request.param.startswith("fake-"):
        fake = FakeIptables()
        yield request.param[5:], lambda argv, stdin: fake.run_sync(argv, stdin=stdin.encode())
        return
    name = request.getfixturevalue("netns")  # skipped without root

    def run(argv: list[str], stdin: str) -> CommandResult:
        done = subprocess.run(
            ["ip", "netns", "exec", name, *argv],
            input=stdin.encode(),
            capture_output=True,
            check=False,
        )
        return CommandResult(done.returncode, done.stdout, done.stderr)

    yield request.param, run


class Tool:
    def __init__(self, backend: str, run: Run) -> None:
        self.backend, self._run = backend, run

    def restore(self, *lines: str, noflush: bool = True, test: bool = False) -> CommandResult:
        argv = [f"iptables-{self.backend}-restore"]
        argv += ["--noflush"] if noflush else []
        argv += ["--test"] if test else []
        return self._run(argv, "\n".join(lines) + "\n")

    def ok(self, *lines: str, noflush: bool = True) -> None:
        result = self.restore(*lines, noflush=noflush)
        assert result.returncode == 0, result.stderr.decode()

    def refused(self, *lines: str, test: bool = False) -> str:
        """Refused, naming a line, and nothing changed; the complaint."""
        before = self.state()
        result = self.restore(*lines, test=test)
        message = result.stderr.decode()
        assert result.returncode != 0, "expected a refusal"
        assert failed_line(message) is not None, message
        assert self.state() == before
        return message

    def save(self, table: str = "filter", *, counters: bool = False) -> str:
        argv = [f"iptables-{self.backend}-save", "-t", table] + (["-c"] if counters else [])
        result = self._run(argv, "")
        assert result.returncode == 0, result.stderr.decode()
        return result.stdout.decode()

    def state(self, table: str = "filter") -> State:
        policies: dict[str, str] = {}
        for line in self.save(table).splitlines():
            if line.startswith(":"):
                name, policy = line[1:].split()[:2]
                policies[name] = policy
        chains = parse_save(self.save(table))[table].chains
        return {
            name: (policy, tuple(line.split(None, 2)[2] for line in chains[name].lines))
            if name in chains
            else (policy, ())
            for name, policy in policies.items()
        }


@pytest.fixture
def t(tool: tuple[str, Run]) -> Tool:
    return Tool(*tool)


EMPTY: State = {c: ("ACCEPT", ()) for c in ("INPUT", "FORWARD", "OUTPUT")}


def test_declare_append_insert_and_jump(t: Tool) -> None:
    assert t.state() == EMPTY
    t.ok(
        "*filter",
        ":cali-a - [0:0]",
        "-A cali-a -s 10.0.0.1/32 -j ACCEPT",
        "-A cali-a -j DROP",
        "-A INPUT -j cali-a",
        "-I cali-a 2 -d 10.0.0.2/32 -j RETURN",
        "-I INPUT -s 10.0.0.9/32 -j ACCEPT",
        "COMMIT",
    )
    assert t.state() == EMPTY | {
        "INPUT": ("ACCEPT", ("-s 10.0.0.9/32 -j ACCEPT", "-j cali-a")),
        "cali-a": ("-", ("-s 10.0.0.1/32 -j ACCEPT", "-d 10.0.0.2/32 -j RETURN", "-j DROP")),
    }


def test_noflush_redeclares_user_chains_but_only_sets_builtin_policies(t: Tool) -> None:
    t.ok("*filter", ":cali-a - [0:0]", "-A cali-a -j DROP", "-A INPUT -j cali-a", "COMMIT")
    t.ok("*filter", ":INPUT DROP [0:0]", ":cali-a - [0:0]", "-A cali-a -j RETURN", "COMMIT")
    assert t.state() == EMPTY | {
        "INPUT": ("DROP", ("-j cali-a",)),
        "cali-a": ("-", ("-j RETURN",)),
    }


def test_without_noflush_the_table_starts_empty(t: Tool) -> None:
    t.ok("*filter", ":INPUT DROP [0:0]", ":cali-a - [0:0]", "-A INPUT -j cali-a", "COMMIT")
    t.ok("*filter", ":cali-z - [0:0]", "COMMIT", noflush=False)
    # Rules and user chains go; the policy stays on legacy, not on nft.
    policy = "DROP" if t.backend == "legacy" else "ACCEPT"
    assert t.state() == EMPTY | {"INPUT": (policy, ()), "cali-z": ("-", ())}


def test_a_refused_line_leaves_the_whole_commit_unwritten(t: Tool) -> None:
    t.ok("*filter", ":cali-a - [0:0]", "-A cali-a -j DROP", "COMMIT")
    t.refused("*filter", ":cali-b - [0:0]", "-A cali-a -j ACCEPT", "-A cali-nope -j DROP", "COMMIT")
    t.refused("*filter", ":cali-b - [0:0]", "-A cali-b -j cali-missing", "COMMIT")
    t.refused("*filter", "-N cali-a", "COMMIT")  # exists already
    assert t.state() == EMPTY | {"cali-a": ("-", ("-j DROP",))}


def test_a_chain_goes_only_empty_and_unreferenced(t: Tool) -> None:
    t.ok(
        "*filter",
        ":cali-a - [0:0]",
        ":cali-b - [0:0]",
        "-A cali-a -g cali-b",
        "-A cali-b -j ACCEPT",
        "COMMIT",
    )
    t.refused("*filter", "-F cali-b", "-X cali-b", "COMMIT")  # cali-a still goes to it
    t.refused("*filter", "-X cali-a", "COMMIT")  # not empty
    t.refused("*filter", "-X INPUT", "COMMIT")
    t.ok("*filter", "-F cali-a", "-X cali-a", "-F cali-b", "-X cali-b", "COMMIT")
    assert t.state() == EMPTY


def test_delete_by_rule_and_by_number(t: Tool) -> None:
    t.ok(
        "*filter",
        "-A INPUT -s 10.0.0.1/32 -j ACCEPT",
        "-A INPUT -s 10.0.0.2/32 -j ACCEPT",
        "-A INPUT -s 10.0.0.3/32 -j ACCEPT",
        "COMMIT",
    )
    t.ok("*filter", "-D INPUT -s 10.0.0.2/32 -j ACCEPT", "-D INPUT 1", "COMMIT")
    assert t.state()["INPUT"] == ("ACCEPT", ("-s 10.0.0.3/32 -j ACCEPT",))
    t.refused("*filter", "-D INPUT -s 10.0.0.2/32 -j ACCEPT", "COMMIT")
    t.refused("*filter", "-D INPUT 5", "COMMIT")


def test_test_mode_writes_nothing_and_nft_only_parses(t: Tool) -> None:
    good = ("*filter", ":cali-a - [0:0]", "-A cali-a -j ACCEPT", "COMMIT")
    assert t.restore(*good, test=True).returncode == 0
    assert t.state() == EMPTY
    t.refused("*filter", "-Q cali-a", "COMMIT", test=True)  # no such command
    t.refused("*filter", "-A", "COMMIT", test=True)  # no chain named
    # A chain that does not exist: legacy's --test says so, nft's passes it
    # (only its commit would refuse it).
    missing = ("*filter", "-A cali-nope -j ACCEPT", "COMMIT")
    if t.backend == "legacy":
        t.refused(*missing, test=True)
    else:
        assert t.restore(*missing, test=True).returncode == 0
        t.refused(*missing)
    assert t.state() == EMPTY


def test_every_table_has_its_builtin_chains_and_save_counts(t: Tool) -> None:
    assert set(t.state("nat")) == {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"}
    assert set(t.state("raw")) == {"PREROUTING", "OUTPUT"}
    assert len(t.state("mangle")) == 5
    t.ok("*nat", ":cali-nat - [0:0]", "-A POSTROUTING -j cali-nat", "COMMIT")
    assert t.state("nat")["POSTROUTING"] == ("ACCEPT", ("-j cali-nat",))
    assert t.state() == EMPTY  # another table untouched
    counted = [line for line in t.save("nat", counters=True).splitlines() if "-A " in line]
    assert counted == ["[0:0] -A POSTROUTING -j cali-nat"]
