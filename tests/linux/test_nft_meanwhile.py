"""nftables: the services tables are written while nft reads the rules' script.

nft looks at the kernel only once its input ends, and the services tables
are tables of their own, so they go in during that window, after the IP
sets, and the rules' one run commits after them without starting again.
A services table refused does not keep the rules out: its error is
raised once they are in. Against the kernel, with the services tables
standing in (what they see of the kernel when they are written).
"""

from __future__ import annotations

from typing import Any, cast

import pytest
import trio

from dataplane.errors import ProgrammingError
from dataplane.linux.nftables.serialise import NftRule
from dataplane.linux.nftables.table import NftTable
from dataplane.linux.programmers import NFTABLES, Programmers
from dataplane.linux.rules.chain import Chain
from tests.linux.test_nft_table import TABLE, held
from tests.linux.test_nft_together import CountingRunner, _chains


class Services:
    """A services table that notes, when written, our chains in the kernel
    and how many nft runs had begun; ``refuse`` makes it fail."""

    def __init__(self, netns: str, runner: CountingRunner, seen: list[str], *, refuse: bool):
        self._netns = netns
        self._runner = runner
        self._seen = seen
        self._refuse = refuse

    async def apply(self) -> bool:
        self._seen.append(f"{','.join(_chains(self._netns))} runs:{self._runner.scripts}")
        if self._refuse:
            raise ProgrammingError("nft refused the services table")
        return True


def _programmers(netns: str, seen: list[str], refuse: int | None = None) -> Programmers:
    runner = CountingRunner(netns)
    nft = {v: NftTable("ip" if v == 4 else "ip6", TABLE, runner) for v in (4, 6)}
    nft[4].set_chains([Chain("cali-x", (NftRule("tcp dport { 80, 443 } accept"),))])
    services = {v: Services(netns, runner, seen, refuse=v == refuse) for v in (4, 6)}
    nothing = cast("Any", None)  # apply_rules touches only the tables
    return Programmers(
        NFTABLES,
        nothing,
        {},
        nothing,
        nothing,
        nothing,
        shaping=nothing,
        nft=nft,
        services=cast("Any", services),
    )


async def _ip_sets() -> None:
    return None


def test_the_services_go_in_before_the_rules_commit_in_their_one_run(netns: str) -> None:
    seen: list[str] = []
    programmers = _programmers(netns, seen)
    trio.run(programmers.apply_rules, (4, 6), _ip_sets)
    # Both families', one after the other, with the rules' nft begun and
    # nothing of it committed; then the rules in, from that one run.
    assert seen == [" runs:1", " runs:1"]
    assert len(held(netns)["cali-x"]) == 1
    assert cast("CountingRunner", programmers.nft[4].runner).scripts == 1


def test_a_refused_services_table_is_raised_once_the_rules_are_in(netns: str) -> None:
    seen: list[str] = []
    programmers = _programmers(netns, seen, refuse=4)
    with pytest.raises(ProgrammingError, match="services table"):
        trio.run(programmers.apply_rules, (4, 6), _ip_sets)
    assert len(held(netns)["cali-x"]) == 1
    assert seen == [" runs:1"]  # the second family's waits for the next apply, as before
