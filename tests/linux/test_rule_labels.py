"""Which policy rule each filter rule came from, and the kernel's counters summed by it."""

from __future__ import annotations

from collections.abc import Sequence

from dataplane.config import Config
from dataplane.linux.iptables.backend import IptablesCommands
from dataplane.linux.iptables.chains import IptChain, IptRule, parse_counters, render_rule
from dataplane.linux.iptables.serialise import IptablesSerialiser
from dataplane.linux.iptables.table import Table
from dataplane.linux.kernel.cmd import CommandResult
from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.render.filter import FilterRenderer
from dataplane.linux.render.rule import RuleRenderer
from dataplane.linux.render.rule_labels import RuleLabels, RuleMap, chain_labels
from dataplane.linux.rules.marks import Marks
from dataplane.linux.rules.rule import Origin
from dataplane.model import (
    Action,
    DirectionPolicy,
    EffectivePolicy,
    Policy,
    PolicyKey,
    PortRange,
    Profile,
    Rule,
    TierPolicies,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)
from dataplane.ops.policy_counters import RuleCounts, count_rules

GUARD = PolicyKey("guard")
WEB = PolicyKey("allow-web", "backend", "NetworkPolicy")
NAMES = ChainNames()
GUARD_POLICY = Policy(
    tier="security",
    inbound=(
        Rule(Action.DENY, protocol="tcp", dst_ports=(PortRange(6666, 6666),)),
        # Two CIDRs: a mark block of three rules, then the verdict and its RETURN.
        Rule(Action.ALLOW, src_nets=("10.0.0.0/8", "192.168.0.0/16")),
        Rule(Action.ALLOW, ip_version=6),  # nothing in IPv4
        Rule(Action.PASS),
        Rule(Action.LOG),
    ),
    outbound=(Rule(Action.ALLOW),),
)
WEB_POLICY = Policy(tier="default", inbound=(Rule(Action.ALLOW, protocol="tcp"),))
PROFILE = Profile(inbound=(Rule(Action.ALLOW),))
POD = WorkloadEndpoint(
    WorkloadEndpointKey("k8s", "ns/pod", "eth0"), "cali1", ipv4_nets=("10.0.0.5/32",)
)
EFFECTIVE = EffectivePolicy(
    ingress=DirectionPolicy(
        tiers=(
            TierPolicies("security", (GUARD,), Action.DENY),
            TierPolicies("default", (WEB,), Action.PASS),  # no end-of-tier drop
        ),
        profiles=("kns.a",),
    )
)


class NoTools:
    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        raise AssertionError("labels never run a tool")


def _renderer(version: int) -> FilterRenderer[IptRule]:
    config = Config()
    marks = Marks.from_mask(config.iptables_mark_mask)
    rules = RuleRenderer(version, marks, lambda s, v: None, config.log_prefix)
    return FilterRenderer(version, config, marks, NAMES, rules, IptablesSerialiser(marks))


def _table(version: int, chains: list[IptChain]) -> Table:
    table = Table("filter", version, NoTools(), IptablesCommands.for_backend("nft", version))
    for chain in chains:
        table.update_chain(chain)
    return table


def _node(version: int, guard: Policy = GUARD_POLICY) -> tuple[Table, FilterRenderer[IptRule]]:
    render = _renderer(version)
    chains = [
        *render.policy_chains(GUARD, guard),
        *render.policy_chains(WEB, WEB_POLICY),
        *render.profile_chains("kns.a", PROFILE),
        *render.workload_chains(POD, EFFECTIVE),
    ]
    return _table(version, chains), render


def _hashes(table: Table, chain: str) -> Sequence[str]:
    desired = table.desired(chain)
    assert desired is not None
    return desired[1]


def test_verdict_rules_and_end_of_tier_drops_are_labelled() -> None:
    tables, renders = {}, {}
    for v in (4, 6):
        tables[v], renders[v] = _node(v)
    labels = RuleLabels().update(tables)
    guard_in, guard_out = NAMES.policy(GUARD, True), NAMES.policy(GUARD, False)
    web_in = NAMES.policy(WEB, True)
    profile_in = NAMES.profile("kns.a", True)
    to_pod, from_pod = NAMES.to_workload("cali1"), NAMES.from_workload("cali1")

    def at(version: int, chain: str, **where: Origin) -> tuple[tuple[int, str], dict[str, Origin]]:
        hashes = _hashes(tables[version], chain)
        return (version, chain), {hashes[int(i[1:])]: label for i, label in where.items()}

    def guard(rule: str, action: str, direction: str = "inbound") -> Origin:
        return Origin("security", "guard", direction, rule, action)

    end_of_security = Origin("security", "", "inbound", "end-of-tier", "deny")
    expected: dict[tuple[int, str], dict[str, Origin]] = dict(
        [
            # v4 inbound: [0 DROP] [1 clear, 2 set, 3 set, 4 accept mark, 5 RETURN]
            # [6 pass mark, 7 RETURN] [8 LOG]; rule 2 renders nothing.
            at(
                4,
                guard_in,
                i0=guard("0", "deny"),
                i4=guard("1", "allow"),
                i6=guard("3", "pass"),
                i8=guard("4", "log"),
            ),
            # v6: rule 1 (IPv4 CIDRs only) renders nothing, rule 2 does.
            at(
                6,
                guard_in,
                i0=guard("0", "deny"),
                i1=guard("2", "allow"),
                i3=guard("3", "pass"),
                i5=guard("4", "log"),
            ),
            *(at(v, guard_out, i0=guard("0", "allow", "outbound")) for v in (4, 6)),
            *(
                at(
                    v,
                    web_in,
                    i0=Origin(
                        "default", "NetworkPolicy:backend/allow-web", "inbound", "0", "allow"
                    ),
                )
                for v in (4, 6)
            ),
            *(
                at(v, profile_in, i0=Origin("__PROFILE__", "kns.a", "inbound", "0", "allow"))
                for v in (4, 6)
            ),
            # Ingress: [0 clear marks] [1 tier security, 2 guard, 3 RETURN, 4 end of tier]
            # [5 tier default, 6 allow-web, 7 RETURN] [8 profile, 9 RETURN] [10 DROP].
            *(
                at(
                    v,
                    to_pod,
                    i4=end_of_security,
                    i10=Origin("__PROFILE__", "", "inbound", "end-of-tier", "deny"),
                )
                for v in (4, 6)
            ),
        ]
    )
    # Egress: anti-spoofing, no tiers, no profiles: only the final drop.
    v4_egress = tables[4].desired(from_pod)
    assert v4_egress is not None
    expected[(4, from_pod)] = {
        v4_egress[1][-1]: Origin("__PROFILE__", "", "outbound", "end-of-tier", "deny")
    }
    v6_egress = tables[6].desired(from_pod)
    assert v6_egress is not None  # no IPv6 address: everything is dropped as spoofed first
    expected[(6, from_pod)] = {
        v6_egress[1][-1]: Origin("__PROFILE__", "", "outbound", "end-of-tier", "deny")
    }
    assert {key: dict(value) for key, value in labels.items()} == expected


def test_labels_follow_changes_to_policies_profiles_and_chains() -> None:
    table, render = _node(4)
    labels = RuleLabels()
    first = labels.update({4: table})
    guard_in = NAMES.policy(GUARD, True)

    # Nothing changed: the same map, not a copy.
    assert labels.update({4: table}) is first

    # A rule that renders nothing in IPv4 goes first: the chain's rules are
    # the same, their origins are not; the table reports the change.
    shifted = Policy("security", (Rule(Action.ALLOW, ip_version=6), GUARD_POLICY.inbound[0]))
    for chain in render.policy_chains(GUARD, shifted):
        table.update_chain(chain)
    # The profile goes.
    table.remove_chain(NAMES.profile("kns.a", True))
    table.remove_chain(NAMES.profile("kns.a", False))
    second = labels.update({4: table})
    assert dict(second[(4, guard_in)]) == {
        _hashes(table, guard_in)[0]: Origin("security", "guard", "inbound", "1", "deny")
    }
    assert (4, NAMES.profile("kns.a", True)) not in second
    assert dict(first[(4, guard_in)]) != dict(
        second[(4, guard_in)]
    )  # published whole, never changed

    # A chain re-rendered with other policy is relabelled from the table's
    # own report of what changed.
    table.update_chain(render.workload_chains(POD, EffectivePolicy())[0])
    third = labels.update({4: table})
    assert dict(third[(4, NAMES.to_workload("cali1"))]) == {
        _hashes(table, NAMES.to_workload("cali1"))[-1]: Origin(
            "__PROFILE__", "", "inbound", "end-of-tier", "deny"
        )
    }


def test_only_the_rule_that_counts_carries_a_label() -> None:
    """A mark block and the RETURN after a verdict belong to the rule but count nothing of it."""
    render = _renderer(4)
    (inbound, _) = render.policy_chains(GUARD, GUARD_POLICY)
    allow_two_nets = [r for r in inbound.rules if r.origin and r.origin.rule == "1"]
    # clear, set, set, the accept mark (the verdict), RETURN
    assert [r.counts for r in allow_two_nets] == [False, False, False, True, False]
    assert chain_labels(inbound.rules, [str(i) for i in range(len(inbound.rules))]) == {
        "0": Origin("security", "guard", "inbound", "0", "deny"),
        "4": Origin("security", "guard", "inbound", "1", "allow"),
        "6": Origin("security", "guard", "inbound", "3", "pass"),
        "8": Origin("security", "guard", "inbound", "4", "log"),
    }


# As iptables-nft-save -c prints it (a trimmed recording): counters before
# each rule, our hash comments, someone else's rules and chains around ours.
RECORDED = """\
# Generated by iptables-nft-save v1.8.9 (nf_tables) on Tue Nov 24 06:03:06 2026
*filter
:INPUT ACCEPT [120:9320]
:FORWARD DROP [3:180]
:OUTPUT ACCEPT [90:7000]
:DOCKER - [0:0]
:cali-pi-guard - [0:0]
[17:1020] -A FORWARD -m comment --comment "cali:wUHhoiAYhphO9Mso" -j cali-FORWARD
[4:240] -A FORWARD -o docker0 -j DOCKER
[3:180] -A cali-pi-guard -p tcp -m comment --comment "cali:Ma6ylx2ZKe_FvLhc" -j DROP
[0:0] -A cali-pi-guard -m comment --comment "cali:mVzU7XXsBAb3oc_3" -m comment --comment "a" -j MARK
[12:720] -A cali-pi-guard -m comment --comment cali:dV3RNJk1m-Hx0CMZ -m mark --mark 0x1 -j RETURN
-A cali-pi-guard -m comment --comment "cali:noCountersHere1" -j DROP
COMMIT
# Completed on Tue Nov 24 06:03:06 2026
"""


def test_parse_counters_reads_our_rules_from_a_recorded_save() -> None:
    assert list(parse_counters(RECORDED)) == [
        ("FORWARD", "wUHhoiAYhphO9Mso", 17, 1020),
        ("cali-pi-guard", "Ma6ylx2ZKe_FvLhc", 3, 180),
        ("cali-pi-guard", "mVzU7XXsBAb3oc_3", 0, 0),
        ("cali-pi-guard", "dV3RNJk1m-Hx0CMZ", 12, 720),
    ]


def _saved(table: Table, counters: dict[str, list[tuple[int, int]]]) -> str:
    """``iptables-save -c`` of ``table`` as the kernel prints it, with these counters."""
    lines = ["*filter", ":FORWARD ACCEPT [0:0]", "[9:900] -A FORWARD -j ACCEPT"]
    for chain, values in counters.items():
        desired = table.desired(chain)
        assert desired is not None
        lines.append(f":{chain} - [0:0]")
        for rule, rule_hash, (p, b) in zip(*desired, values, strict=True):
            lines.append(f"[{p}:{b}] " + render_rule(chain, rule, rule_hash))
    return "\n".join([*lines, "COMMIT", ""])


def test_counters_are_summed_per_policy_rule_over_its_rules_and_versions() -> None:
    tables, renders = {}, {}
    for v in (4, 6):
        tables[v], renders[v] = _node(v)
    rules: RuleMap = RuleLabels().update(tables)
    guard_in = NAMES.policy(GUARD, True)
    to_pod = NAMES.to_workload("cali1")
    # Every rule gets (index + 1) packets of 100 bytes times 10 in v6.
    v4 = _saved(
        tables[4],
        {
            guard_in: [(i + 1, 100 * (i + 1)) for i in range(9)],
            to_pod: [(i + 1, 100 * (i + 1)) for i in range(11)],
        },
    )
    v6 = _saved(tables[6], {guard_in: [(10 * (i + 1), 1000 * (i + 1)) for i in range(6)]})
    counted = count_rules(rules, {4: v4, 6: v6})

    def guard(rule: str, action: str) -> Origin:
        return Origin("security", "guard", "inbound", rule, action)

    assert counted == {
        # v4 positions 0, 4, 6, 8; v6 positions 0, 1, 3, 5.
        guard("0", "deny"): RuleCounts(1 + 10, 100 + 1000),
        guard("1", "allow"): RuleCounts(5, 500),
        guard("2", "allow"): RuleCounts(20, 2000),
        guard("3", "pass"): RuleCounts(7 + 40, 700 + 4000),
        guard("4", "log"): RuleCounts(9 + 60, 900 + 6000),
        Origin("security", "", "inbound", "end-of-tier", "deny"): RuleCounts(5, 500),
        Origin("__PROFILE__", "", "inbound", "end-of-tier", "deny"): RuleCounts(11, 1100),
    }
