"""iptables: the two families' tables go in side by side, each in its order.

Each family's restores run raw, mangle, nat, filter in turn; IPv4's and
IPv6's run at once (on iptables-nft each restore mostly reads the kernel's
tables, and a new pod waited for both in turn). One family refused does
not stop the other, and its error is raised once both are done. The IP
sets are written before any restore: iptables commits each table at its
COMMIT line, so nothing of the sets can go beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest
import trio

from dataplane.config import Config
from dataplane.errors import ProgrammingError
from dataplane.linux.iptables.chains import IptRule
from dataplane.linux.kernel.cmd import CommandResult
from dataplane.linux.programmers import Programmers, _iptables
from dataplane.linux.rules.chain import Chain
from tests.linux.fake_iptables import FakeIptables


class Overlapping(FakeIptables):
    """A restore that waits until the other family has started one of its own,
    and the order of the restores each family ran."""

    def __init__(self, refuse: int | None = None) -> None:
        super().__init__()
        self.started = {4: trio.Event(), 6: trio.Event()}
        self.order: dict[int, list[str]] = {4: [], 6: []}
        self.refuse = refuse  # the family whose restores fail
        self.events: list[str] = []  # "ip sets" and each restore, in turn

    async def ip_sets(self) -> None:
        self.events.append("ip sets")

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        tool = argv[0]
        if "restore" in tool:
            version = 6 if tool.startswith("ip6") else 4
            self.order[version].append((stdin or b"").split(b"\n", 1)[0].decode())
            self.events.append(tool)
            self.started[version].set()
            await self.started[10 - version].wait()  # deadlocks if run one after the other
            if version == self.refuse:
                raise ProgrammingError(f"{tool}: refused")
        return await super().run(argv, stdin=stdin, check=check)


def _programmers(runner: FakeIptables) -> Programmers:
    tables = _iptables(Config(), runner, "nft", "cali-", lambda: 0.0, (4, 6))
    for (name, _), table in tables.items():
        table.set_chains([Chain("cali-x", (IptRule("", "-j ACCEPT"),))])
        hook = {"raw": "PREROUTING", "mangle": "PREROUTING", "nat": "PREROUTING"}
        table.set_hooks(hook.get(name, "FORWARD"), [IptRule("", "-j cali-x")])
    nothing = cast("Any", None)  # apply_rules touches only the tables
    return Programmers(
        "nft", nothing, dict(tables), nothing, nothing, nothing, shaping=nothing, iptables=tables
    )


def test_the_families_go_in_side_by_side_each_in_its_order() -> None:
    runner = Overlapping()
    programmers = _programmers(runner)

    async def main() -> None:
        with trio.fail_after(10):  # one family after the other never ends
            await programmers.apply_rules((4, 6), runner.ip_sets)

    trio.run(main)
    for version in (4, 6):
        assert runner.order[version] == ["*raw", "*mangle", "*nat", "*filter"]
    assert runner.events[0] == "ip sets" and runner.events.count("ip sets") == 1


def test_a_refused_family_does_not_stop_the_other() -> None:
    runner = Overlapping(refuse=4)
    programmers = _programmers(runner)

    async def main() -> None:
        with trio.fail_after(10), pytest.raises(ProgrammingError, match="iptables-nft"):
            await programmers.apply_rules((4, 6), runner.ip_sets)

    trio.run(main)
    assert set(runner.order[4]) == {"*raw"}  # refused (and retried to find the culprit)
    assert runner.order[6] == ["*raw", "*mangle", "*nat", "*filter"]
