"""The rule model in nft syntax, committed by the kernel itself.

Felix rules drawn as ``test_render_kernel`` draws them (every ``Rule``
field, hostile text, and the ``ConfigUpdate`` keys that change rendering)
go through the driver's conversion and the policy rule renderer; the model
rules they give are serialised for nft and the script is checked
(``nft --check``) and then committed (``nft -f``: the kernel refuses some
rules only at commit) in a throwaway namespace, with the sets the rules
name. Properties: the kernel takes every table, and then holds exactly as
many rules per chain as were rendered -- no text from a message added,
removed or split a rule.

The same for every table the renderers build (filter, raw, mangle, nat:
all but kube-proxy's service chains, which are iptables' own layout),
drawn as ``test_render_kernel`` draws whole nodes, each iptables table an
nft table with its built-in chains as hooked base chains.

Both serialisers are also held to one meaning: for each model rule the
nft rendering and the iptables one use the same mark bits and end in the
rule that carries the origin.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

import trio
from hypothesis import given, seed, target
from hypothesis import strategies as st

from dataplane.config import Config, parse_config
from dataplane.linux.iptables.serialise import IptablesSerialiser
from dataplane.linux.kernel.cmd import ProcessRunner
from dataplane.linux.kernel.netns import socket_in
from dataplane.linux.nftables.elements import (
    NFPROTO_IPV4,
    NFPROTO_IPV6,
    ElementWriter,
    netfilter_socket,
)
from dataplane.linux.nftables.iface_data import DataSet, InterfaceData
from dataplane.linux.nftables.reader import TableReader
from dataplane.linux.nftables.serialise import NftRule, NftSerialiser
from dataplane.linux.nftables.set_elements import interface_ranges
from dataplane.linux.nftables.sets import NftSets
from dataplane.linux.nftables.table import NftTable
from dataplane.linux.nftables.view import NftTableView
from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.render.rule import RuleRenderer
from dataplane.linux.render.shared_workloads import FROM_MAP, SOURCES, TO_MAP
from dataplane.linux.rules.chain import Chain
from dataplane.linux.rules.marks import Marks
from dataplane.linux.rules.rule import PROFILE_TIER, TableRule
from dataplane.managers import convert
from dataplane.model import IPSet, Policy, PolicyKey, Rule, WorkloadEndpoint
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.linux.test_render_kernel import (
    _KINDS,
    ADDRESS_SETS,
    ALL_HOSTS,
    ALL_POOLS,
    CONFIG_VALUES,
    FOUND,
    MASQ_POOLS,
    PORT_SETS,
    VXLAN_SOURCES,
    NodeState,
    _accepted,
    _settings,
    in_netns,
    node_states,
    render_model_tables,
    set_kernel_name,
)
from tests.linux.test_render_kernel import rules as felix_rules

# Each example runs nft a few times (~0.3 s each): fewer than the iptables
# tests' 800 in CI, which keeps the three tests to a few minutes there.
EXAMPLES = int(os.environ.get("DP_NFT_EXAMPLES", "200" if os.environ.get("CI") == "true" else "30"))


_NFPROTO = {4: NFPROTO_IPV4, 6: NFPROTO_IPV6}


def nft_set_name(set_id: str, version: int) -> str:
    # The test's sets have no "." in their ids, so this is one to one.
    return set_kernel_name(set_id, version).replace(":", ".")


def _set_decl(set_id: str, version: int) -> str:
    """An nft set for one of the test's IP sets (pools, hosts: networks)."""
    addr = "ipv4_addr" if version == 4 else "ipv6_addr"
    if set_id in PORT_SETS:
        kind = f"type {addr} . inet_proto . inet_service"
    else:
        kind = f"type {addr}; flags interval"
    return f"  set {nft_set_name(set_id, version)} {{ {kind}; }}"


@dataclass(frozen=True)
class Drawn:
    """Config keys and the policy rules the driver's edge accepted."""

    config: dict[str, str]
    inbound: tuple[Rule, ...]
    outbound: tuple[Rule, ...]


@st.composite
def drawn(draw: st.DrawFn) -> Drawn:
    """Config keys and rules, each rule through the driver's edge."""
    config = {k: draw(st.sampled_from(v)) for k, v in CONFIG_VALUES.items() if draw(st.booleans())}
    kept: list[Rule] = []
    for message in draw(st.lists(felix_rules(consistent=True), max_size=8)):
        policy = _accepted(convert.policy, pb.Policy(inbound_rules=[message], tier="t"))
        if policy is not None:
            kept.extend(policy.inbound)
    split = draw(st.integers(0, len(kept)))
    return Drawn(config, tuple(kept[:split]), tuple(kept[split:]))


def model_chains(state: Drawn, version: int) -> tuple[Config, dict[str, tuple[TableRule, ...]]]:
    config = _accepted(parse_config, state.config) or Config()
    marks = Marks.from_mask(config.iptables_mark_mask)
    known = {**ADDRESS_SETS, **PORT_SETS}

    def set_name(set_id: str, v: int) -> str | None:
        return nft_set_name(set_id, v) if set_id in known else None

    rules_ = RuleRenderer(version, marks, set_name, config.log_prefix)
    key = PolicyKey("drawn")
    names = ChainNames()
    return config, {
        names.policy(key, True): rules_.render_all(state.inbound, "t", str(key), "inbound"),
        names.policy(key, False): rules_.render_all(state.outbound, "t", str(key), "outbound"),
        names.profile("drawn", True): rules_.render_all(
            state.outbound, PROFILE_TIER, "drawn", "inbound"
        ),
    }


def size(chains: dict[str, tuple[NftRule, ...]]) -> None:
    """Steer Hypothesis towards many rules, and many kinds of statement."""
    texts = [rule.text for rules in chains.values() for rule in rules]
    target(float(len(texts)), label="rules")
    target(float(len({w for t in texts for w in t.split() if w.isalpha()})), label="words")


# Each iptables table is an nft table here, its built-in chains base chains.
_BASE = {
    "filter": {
        "INPUT": "type filter hook input priority filter",
        "FORWARD": "type filter hook forward priority filter",
        "OUTPUT": "type filter hook output priority filter",
    },
    "raw": {
        "PREROUTING": "type filter hook prerouting priority raw",
        "OUTPUT": "type filter hook output priority raw",
    },
    "mangle": {
        "PREROUTING": "type filter hook prerouting priority mangle",
        "POSTROUTING": "type filter hook postrouting priority mangle",
    },
    "nat": {
        "PREROUTING": "type nat hook prerouting priority dstnat",
        "OUTPUT": "type nat hook output priority -100",
        "POSTROUTING": "type nat hook postrouting priority srcnat",
    },
}
_ALL_SETS = [*ADDRESS_SETS, *PORT_SETS, ALL_POOLS, MASQ_POOLS, VXLAN_SOURCES, ALL_HOSTS]


def table_script(
    version: int,
    table: str,
    chains: list[Chain[NftRule]],
    hooks: Mapping[str, tuple[NftRule, ...]],
) -> tuple[str, dict[str, int]]:
    family = "ip" if version == 4 else "ip6"
    lines = [f"table {family} dp-{table} {{"]
    lines += [_set_decl(s, version) for s in _ALL_SETS]
    counts: dict[str, int] = {}
    for chain in chains:
        lines.append(f"  chain {chain.name} {{")
        lines += [f"    {rule.written()}" for rule in chain.rules]
        lines.append("  }")
        counts[chain.name] = len(chain.rules)
    for builtin, rules in hooks.items():
        lines.append(f"  chain hook-{builtin} {{ {_BASE[table][builtin]};")
        lines += [f"    {rule.written()}" for rule in rules]
        lines.append("  }")
        counts[f"hook-{builtin}"] = len(rules)
    lines.append("}")
    return "\n".join(lines) + "\n", counts


def commit(netns: str, version: int, table: str, text: str, wanted: dict[str, int]) -> None:
    """``nft --check`` then ``nft -f`` of ``text`` replacing ``table``; the
    kernel must take it and then hold ``wanted`` rules per chain."""
    family = "ip" if version == 4 else "ip6"
    numbered = "\n".join(f"{n}: {line}" for n, line in enumerate(text.splitlines(), 1))
    in_netns(netns, ["nft", "delete", "table", family, f"dp-{table}"])
    checked = in_netns(netns, ["nft", "--check", "-f", "-"], text)
    assert checked.returncode == 0, f"nft --check refused: {checked.stderr}\n{numbered}"
    done = in_netns(netns, ["nft", "-f", "-"], text)
    assert done.returncode == 0, f"nft -f refused: {done.stderr}\n{numbered}"
    assert held_in(netns, family, f"dp-{table}") == wanted


def held_in(netns: str, family: str, table: str) -> dict[str, int]:
    # What an operator runs must work on what we wrote.
    listed = in_netns(netns, ["nft", "list", "table", family, table])
    assert listed.returncode == 0, listed.stderr
    out = in_netns(netns, ["nft", "-j", "list", "table", family, table])
    counts: dict[str, int] = {}
    for item in json.loads(out.stdout)["nftables"]:
        if "chain" in item:
            counts.setdefault(item["chain"]["name"], 0)
        elif "rule" in item:
            counts[item["rule"]["chain"]] = counts.get(item["rule"]["chain"], 0) + 1
    return counts


@seed(20261124)
@_settings("test_render_nft.test_every_policy_chain_commits_on_nft", EXAMPLES)
@given(state=drawn())
def test_every_policy_chain_commits_on_nft(module_netns: str, state: Drawn) -> None:
    scripts = {}
    for version in (4, 6):
        config, model = model_chains(state, version)
        nft = NftSerialiser(version, Marks.from_mask(config.iptables_mark_mask))
        scripts[version] = {name: nft.rules(rules) for name, rules in model.items()}
    size({f"{v}{name}": rules for v, chains in scripts.items() for name, rules in chains.items()})
    for version, chains in scripts.items():
        listed = [Chain(name, rules) for name, rules in chains.items()]
        text, wanted = table_script(version, "policy", listed, {})
        commit(module_netns, version, "policy", text, wanted)


@seed(20261124)
@_settings("test_render_nft.test_both_serialisers_say_the_same_rules", EXAMPLES)
@given(state=drawn())
def test_both_serialisers_say_the_same_rules(state: Drawn) -> None:
    for version in (4, 6):
        config, model = model_chains(state, version)
        marks = Marks.from_mask(config.iptables_mark_mask)
        nft, ipt = NftSerialiser(version, marks), IptablesSerialiser(marks)
        for rules in model.values():
            for rule in rules:
                a, b = nft.rule(rule), ipt.rule(rule)
                # The last rule of each carries the model rule; only it counts.
                assert (a[-1].origin, a[-1].counts) == (rule.origin, rule.counts)
                assert (b[-1].origin, b[-1].counts) == (rule.origin, rule.counts)
                assert not any(r.counts for r in a[:-1])
                assert not any(r.counts for r in b[:-1])
                # nft needs at most the blocks iptables needs (it has sets).
                assert len(a) <= len(b)


@seed(20261124)
@_settings("test_render_nft.test_every_table_commits_on_nft", EXAMPLES)
@given(state=node_states(), extra=drawn())
def test_every_table_commits_on_nft(module_netns: str, state: NodeState, extra: Drawn) -> None:
    """Filter, raw, mangle and nat (everything but kube-proxy's service
    chains, which are iptables' layout) in nft syntax, hooked in, committed."""
    for version in (4, 6):
        tables = render_model_tables(
            state,
            version,
            partial(NftSerialiser, version),
            nft_set_name,
            {PolicyKey("drawn"): Policy("t", extra.inbound, extra.outbound)},
        )
        for table, (chains, hooks) in tables.items():
            text, wanted = table_script(version, table, chains, hooks)
            commit(module_netns, version, table, text, wanted)


def test_the_fastest_packet_rate_commits_on_nft(module_netns: str) -> None:
    """10,000 packets a second in bursts of 10,000, the edge's limit: nft takes it."""
    for version in (4, 6):
        tables = render_model_tables(
            FOUND[2], version, partial(NftSerialiser, version), nft_set_name, {}
        )
        for table, (chains, hooks) in tables.items():
            text, wanted = table_script(version, table, chains, hooks)
            commit(module_netns, version, table, text, wanted)


@seed(20261124)
@_settings(
    "test_render_nft.test_a_whole_node_lands_in_one_table_per_family", max(EXAMPLES // 8, 10)
)
@given(state=node_states(), extra=drawn())
def test_a_whole_node_lands_in_one_table_per_family(
    module_netns: str, state: NodeState, extra: Drawn
) -> None:
    """The programmers' own path: the node's IP sets as native sets
    (NftSets), the four tables as views of one NftTable per family, chains
    named by their table and jumps with them, workloads as nftables holds
    them (chains shared by policy; their interfaces and sources as map and
    set elements); the kernel takes it all and holds what was rendered."""
    kinds = {**ADDRESS_SETS, **PORT_SETS}
    runner = ProcessRunner(module_netns)
    socket = partial(socket_in, module_netns, netfilter_socket)
    writer = ElementWriter(socket)
    sets = NftSets(runner, writer, TableReader(socket), {4: "dp-node", 6: "dp-node"})
    for set_id in _ALL_SETS:
        sets.replace(IPSet(set_id, _KINDS[kinds.get(set_id, "hash:net")], frozenset()))
    for version in (4, 6):
        family = "ip" if version == 4 else "ip6"
        data = InterfaceData(_NFPROTO[version], "dp-node", writer, TableReader(socket))
        table = NftTable(family, "dp-node", runner, data=data)
        filter_view = NftTableView(table, "filter", version)
        address = "ipv4_addr" if version == 4 else "ipv6_addr"
        filter_view.declare(DataSet(FROM_MAP, "type ifname : verdict"))
        filter_view.declare(DataSet(TO_MAP, "type ifname : verdict"))
        filter_view.declare(DataSet(SOURCES, f"type ifname . {address}; flags interval"))

        reached: dict[str, str] = {}

        def endpoint(
            wep: WorkloadEndpoint,
            to: str,
            from_: str,
            sources: tuple[str, ...],
            *,
            view: NftTableView = filter_view,
            version: int = version,
            reached: dict[str, str] = reached,
        ) -> None:
            reached[wep.name] = view.prefix + to
            view.put_goto(TO_MAP, wep.name, to)
            view.put_goto(FROM_MAP, wep.name, from_)
            view.put_elements(SOURCES, wep.name, interface_ranges(wep.name, sources, version))

        wanted: dict[str, int] = {}
        for name in ("raw", "mangle", "nat", "filter"):
            view = filter_view if name == "filter" else NftTableView(table, name, version)
            rendered = render_model_tables(
                state,
                version,
                partial(NftSerialiser, version, chain_prefix=view.prefix),
                sets.kernel_name,
                {PolicyKey("drawn"): Policy("t", extra.inbound, extra.outbound)},
                shared=endpoint,
            )
            chains, hooks = rendered[name]
            view.set_chains(chains)
            for builtin, rules in hooks.items():
                view.set_hooks(builtin, rules)
            wanted |= {view.prefix + c.name: len(c.rules) for c in chains}
            wanted |= {view.prefix + b: len(r) for b, r in hooks.items()}

        async def program(table: NftTable = table) -> None:
            await sets.apply_updates()
            await table.apply()

        try:
            trio.run(program)
            assert table.held_back() == {}
            assert held_in(module_netns, family, "dp-node") == wanted
            # Each workload's interface reaches its shared chain.
            read = TableReader(socket).elements(_NFPROTO[version], "dp-node", TO_MAP)
            assert {
                e.key.rstrip(b"\0").decode(): e.verdict.chain for e in read if e.verdict
            } == reached
        finally:
            trio.run(table.cleanup)
