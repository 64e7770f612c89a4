"""The order of an ``nft -f`` script's lines: chains with anonymous sets filled first.

The kernel binds each anonymous set (``tcp dport { 80, 443 }``) by walking
the transaction so far, so the table fills the chains that hold one
before the others. Drawn chains: every chain is declared before any is
filled, those holding an anonymous set are filled before the rest, and
each chain's own lines stay together and in order. Against the kernel:
chains of both kinds jumping to each other, new and rewritten, land as
wanted.
"""

from __future__ import annotations

import trio
from hypothesis import given
from hypothesis import strategies as st

from dataplane.linux.kernel.cmd import ProcessRunner
from dataplane.linux.nftables.serialise import NftRule
from dataplane.linux.nftables.table import NftTable, rule_hashes
from dataplane.linux.rules.chain import Chain
from tests.linux.test_nft_table import TABLE, held

_RULES = st.sampled_from(
    [
        NftRule("tcp dport 22 drop"),
        NftRule("tcp dport { 80, 443 } accept"),
        NftRule("ip saddr { 10.0.0.1, 10.0.0.2 } drop"),
        NftRule("meta mark set 0x10"),
        NftRule("return"),
    ]
)
_CHAINS = st.dictionaries(
    st.from_regex(r"cali-[a-z]{1,6}", fullmatch=True),
    st.lists(_RULES, min_size=1, max_size=6).map(tuple),
    min_size=1,
    max_size=12,
)


def _anonymous(rules: tuple[NftRule, ...]) -> bool:
    return any("{" in rule.text for rule in rules)


@given(_CHAINS, st.data())
def test_chains_with_anonymous_sets_are_filled_first_and_each_chain_in_order(
    chains: dict[str, tuple[NftRule, ...]], data: st.DataObject
) -> None:
    """Some of the chains are in the kernel already (flushed, then filled)."""
    present = data.draw(st.sets(st.sampled_from(sorted(chains))))
    table = NftTable("ip", TABLE, ProcessRunner())
    table.set_chains([Chain(name, rules) for name, rules in chains.items()])
    actual: dict[str, list[str | None]] = {name: [] for name in present}
    parts, written = table.script(actual, set())
    assert set(written) == set(chains)
    script = parts.lines
    # The head ends with the last anonymous set's chain: after it, only
    # the other chains' fills (what another table's head goes before).
    assert all(chain is None or not _anonymous(chains[chain]) for _, chain in parts.tail)
    assert all(not line.startswith("add chain") for line, _ in parts.tail)
    assert all(
        chain is None or _anonymous(chains[chain])
        for line, chain in parts.head
        if not line.startswith("add chain")
    )
    kinds = [line.split()[0:2] for line, _ in script]
    filling = [i for i, kind in enumerate(kinds) if kind in (["add", "rule"], ["flush", "chain"])]
    declaring = [i for i, kind in enumerate(kinds) if kind == ["add", "chain"]]
    assert max(declaring) < min(filling)
    filled = [name for i in filling if (name := script[i][1]) is not None]
    assert len(filled) == len(filling)  # every fill names its chain (for blame)
    order = list(dict.fromkeys(filled))
    # Each chain's lines together (a flush where it is present, then its
    # rules); the anonymous sets' chains first.
    assert filled == [name for name in order for _ in range(len(chains[name]) + (name in present))]
    kinds_in_order = [_anonymous(chains[name]) for name in order]
    assert kinds_in_order == sorted(kinds_in_order, reverse=True)
    for name in order:
        lines = [line for line, chain in script if chain == name and line.startswith("add rule")]
        hashes = written[name] or []
        assert [line.split(f" {name} ", 1)[1] for line in lines] == [
            rule.written(f"cali:{h}") for rule, h in zip(chains[name], hashes, strict=True)
        ]


def test_chains_of_both_kinds_jumping_to_each_other_land(netns: str) -> None:
    runner = ProcessRunner(netns)
    table = NftTable("ip", TABLE, runner)

    def want(port: int) -> list[Chain[NftRule]]:
        return [
            Chain("cali-a", (NftRule(f"tcp dport {port} jump cali-z"),)),
            Chain("cali-m", (NftRule("jump cali-a"), NftRule("return"))),
            Chain("cali-z", (NftRule(f"tcp dport {{ {port}, 443 }} accept"), NftRule("drop"))),
            Chain("cali-y", (NftRule("ip saddr { 10.0.0.1, 10.0.0.2 } jump cali-m"),)),
        ]

    for port in (80, 8080):  # all new; then the two that changed flushed and filled
        chains = want(port)
        table.set_chains(chains)
        assert trio.run(table.apply)
        kernel = held(netns)
        for chain in chains:
            comments = [comment for _, comment in kernel[chain.name]]
            hashes = rule_hashes(chain.name, chain.rules)
            assert [c.split()[0] for c in comments] == [f"cali:{h}" for h in hashes]
