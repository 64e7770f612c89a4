"""Pure renderers: golden output for policies, endpoints and static chains,
plus properties of the dispatch tree and of rule rendering.

Regenerate the golden files after an intended change with
``UPDATE_GOLDEN=1 make pytest``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from dataplane.config import Config
from dataplane.linux.iptables.chains import IptChain, IptRule, render_rule
from dataplane.linux.iptables.serialise import IptablesSerialiser
from dataplane.linux.render.chain_names import MAX_CHAIN_NAME, ChainNames
from dataplane.linux.render.filter import FilterRenderer
from dataplane.linux.render.nat import NatRenderer
from dataplane.linux.render.rule import RuleRenderer
from dataplane.linux.rules.comment import safe_comment
from dataplane.linux.rules.marks import Marks
from dataplane.managers.resolve import host_effective_policy, workload_effective_policy
from dataplane.model import (
    Action,
    IcmpMatch,
    NatInfo,
    Policy,
    PolicyKey,
    PortRange,
    Rule,
    TierInfo,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "linux"
KNOWN_SETS = {"s:web", "s:db", "n:http", "s:block"}


def _set_name(set_id: str, version: int) -> str | None:
    return f"cali{version}0{set_id}" if set_id in KNOWN_SETS else None


def _renderer(version: int, config: Config | None = None) -> FilterRenderer[IptRule]:
    config = config or Config()
    marks = Marks.from_mask(config.iptables_mark_mask)
    rules = RuleRenderer(version, marks, _set_name, config.log_prefix)
    return FilterRenderer(version, config, marks, ChainNames(), rules, IptablesSerialiser(marks))


def _dump(chains: list[IptChain]) -> str:
    out = []
    for chain in chains:
        out.append(f":{chain.name}")
        out.extend(f"  {rule.text()}" for rule in chain.rules)
    return "\n".join(out) + "\n"


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from the golden file"


POLICY = Policy(
    tier="default",
    inbound=(
        Rule(Action.DENY, src_ip_set_ids=("s:block",)),
        Rule(
            Action.ALLOW,
            protocol="tcp",
            src_ip_set_ids=("s:web",),
            dst_ports=(PortRange(80, 80), PortRange(8000, 8100)),
            dst_named_port_ip_set_ids=("n:http",),
        ),
        Rule(Action.ALLOW, protocol="icmp", icmp=IcmpMatch(8), src_nets=("10.65.0.0/16",)),
        Rule(Action.ALLOW, protocol="icmpv6", icmp=IcmpMatch(128, 0)),
        Rule(
            Action.ALLOW,
            protocol="udp",
            src_nets=("10.1.0.0/16", "10.2.0.0/16", "fd00:1::/64"),
            not_dst_nets=("10.9.0.0/24", "10.8.0.0/24"),
            not_dst_ports=(PortRange(53, 53),),
        ),
        Rule(Action.PASS, not_protocol="tcp", not_src_ip_set_ids=("s:db",)),
        Rule(Action.LOG, ip_version=6),
        Rule(Action.ALLOW, src_ip_set_ids=("s:missing",)),  # empty set: never matches
        Rule(Action.DENY, not_src_ip_set_ids=("s:missing",), protocol="sctp"),
    ),
    outbound=(
        Rule(Action.ALLOW, protocol="tcp", dst_ports=tuple(PortRange(p, p) for p in range(1, 21))),
    ),
)


def test_policy_chains_golden() -> None:
    key = PolicyKey("allow-web", "prod", "NetworkPolicy")
    text = "".join(_dump(_renderer(v).policy_chains(key, POLICY)) for v in (4, 6))
    _golden("policy.txt", text)


def _endpoint(**kwargs: object) -> WorkloadEndpoint:
    base: dict[str, object] = {
        "key": WorkloadEndpointKey("k8s", "prod/web-1", "eth0"),
        "name": "cali12345678901",
        "ipv4_nets": ("10.65.0.10/32",),
        "ipv6_nets": ("fd00:10:65::a/128",),
        "profile_ids": ("kns.prod",),
        "tiers": (
            TierInfo("security", (PolicyKey("sec"),), (PolicyKey("sec"),), Action.DENY),
            TierInfo(
                "default", (PolicyKey("allow-web", "prod", "NetworkPolicy"),), (), Action.PASS
            ),
        ),
    }
    base.update(kwargs)
    return WorkloadEndpoint(**base)  # type: ignore[arg-type]


def _workload_chains(
    render: FilterRenderer[IptRule],
    endpoint: WorkloadEndpoint,
    active_policy: Callable[[PolicyKey], bool],
    active_profile: Callable[[str], bool],
) -> list[IptChain]:
    """As the platform renders them: with the policy the managers resolve."""
    policy = workload_effective_policy(endpoint, active_policy, active_profile)
    return render.workload_chains(endpoint, policy)


def test_workload_chains_golden() -> None:
    known = {PolicyKey("sec"), PolicyKey("allow-web", "prod", "NetworkPolicy")}
    chains = []
    for v in (4, 6):
        r = _renderer(v)
        chains += _workload_chains(r, _endpoint(), known.__contains__, {"kns.prod"}.__contains__)
        chains += _workload_chains(
            r,
            _endpoint(
                name="calispoofable1",
                allow_spoofed_source_prefixes=("192.168.0.0/16", "10.0.0.0/8"),
                tiers=(),
            ),
            known.__contains__,
            {"kns.prod"}.__contains__,
        )
        chains += _workload_chains(
            r, _endpoint(name="calidown", state="inactive"), known.__contains__, lambda _: True
        )
    _golden("workload.txt", _dump(chains))


def test_static_chains_golden() -> None:
    config = Config(interface_prefixes=("cali", "tap"), default_endpoint_to_host_action="ACCEPT")
    chains = []
    for v in (4, 6):
        chains += _renderer(v, config).static_chains()
    _golden("static.txt", _dump(chains))


def test_nat_chains_golden() -> None:
    chains = []
    for v in (4, 6):
        nat = NatRenderer(
            v,
            ChainNames(),
            IptablesSerialiser(),
            f"cali{v}0all",
            f"cali{v}0masq",
            0x1000000,
            (32768, 60999),
        )
        chains += nat.chains(
            [NatInfo("172.16.0.5", "10.65.0.10"), NatInfo("fd00:ff::5", "fd00:10:65::a")]
        )
    _golden("nat.txt", _dump(chains))


def test_missing_policy_and_profile_are_skipped() -> None:
    chains = _workload_chains(_renderer(4), _endpoint(), lambda _: False, lambda _: False)
    text = _dump(chains)
    assert "cali-pi-" not in text and "cali-pri-" not in text
    # With nothing to allow, the endpoint denies.
    assert chains[0].rules[-1].action == "-j DROP"


@given(st.lists(st.text("0123456789abcdef", min_size=11, max_size=11), max_size=3000, unique=True))
def test_dispatch_tree_reaches_every_interface_in_few_rules(suffixes: list[str]) -> None:
    ifaces = ["cali" + s for s in suffixes]
    r = _renderer(4)
    chains = {c.name: c for c in r.dispatch.workloads(ifaces)}
    root = "cali-from-wl-dispatch"
    for chain in chains.values():
        assert len(chain.name) <= MAX_CHAIN_NAME
        assert len(chain.rules) <= 18  # 16 leaves or branches, one default, slack
    for iface in ifaces[:200]:
        # Walk the tree as the kernel would: first matching rule wins.
        chain, visited = chains[root], 0
        while True:
            rule = next(
                r
                for r in chain.rules
                if not r.match
                or r.match == f"-i {iface}"
                or (r.match.endswith("+") and iface.startswith(r.match[3:-1]))
            )
            visited += chain.rules.index(rule) + 1
            target = rule.action.split()[-1]
            if target in chains:
                chain = chains[target]
                continue
            assert target == f"cali-fw-{iface}"
            break
        assert visited <= 60


ifaces = st.sets(st.sampled_from([f"cali{i:011x}" for i in range(60)] + ["eth0", "cali"]))


@given(st.lists(ifaces, min_size=1, max_size=8))
def test_dispatch_trees_rendered_again_equal_a_fresh_rendering(history: list[set[str]]) -> None:
    # One renderer follows interfaces coming and going (reusing subtrees
    # it rendered before); a fresh one renders each set from nothing.
    ongoing = _renderer(4)
    for members in history:
        assert ongoing.dispatch.workloads(members) == _renderer(4).dispatch.workloads(members)
        for hosts in (members | {""}, members):  # with and without an all-interfaces one
            assert ongoing.dispatch.hosts(hosts) == _renderer(4).dispatch.hosts(hosts)


def test_multiport_splits_past_fifteen_entries() -> None:
    marks = Marks.from_mask(0xFFFF0000)
    r = RuleRenderer(4, marks, _set_name)
    rules = IptablesSerialiser(marks).rules(
        r.render(
            Rule(
                Action.DENY,
                protocol="tcp",
                dst_ports=tuple(PortRange(p, p + 1) for p in range(0, 40, 2)),
            )
        )
    )
    multiports = [x.match for x in rules if "multiport" in x.match]
    assert len(multiports) == 3  # 20 ranges, 7 per 15-entry chunk
    assert rules[-1].text() == "-p tcp -m mark --mark 0x800000/0x800000 -j DROP"


def test_rule_for_other_family_renders_nothing() -> None:
    v6 = RuleRenderer(6, Marks.from_mask(0xFFFF0000), _set_name)
    assert v6.render(Rule(Action.ALLOW, src_nets=("10.0.0.0/8",))) == []
    assert v6.render(Rule(Action.ALLOW, protocol="icmp")) == []
    assert v6.render(Rule(Action.ALLOW, ip_version=4)) == []


def test_host_endpoint_chains_golden() -> None:
    from dataplane.linux.render.hostpolicy import HostPolicyRenderer  # noqa: PLC0415
    from dataplane.model import HostEndpoint, HostEndpointKey  # noqa: PLC0415

    untracked = PolicyKey("untracked-ssh")
    predant = PolicyKey("prednat-nodeport")
    normal = PolicyKey("host-normal")
    forward = PolicyKey("host-forward")
    policies = {
        untracked: Policy(
            "default",
            (Rule(Action.ALLOW, protocol="tcp", dst_ports=(PortRange(22, 22),)),),
            untracked=True,
        ),
        predant: Policy(
            "default",
            (Rule(Action.DENY, protocol="tcp", dst_ports=(PortRange(30080, 30080),)),),
            pre_dnat=True,
        ),
        normal: Policy("default", (Rule(Action.ALLOW, protocol="tcp"),)),
        forward: Policy("default", (Rule(Action.ALLOW, protocol="udp"),)),
    }
    hep = HostEndpoint(
        HostEndpointKey("node-eth0"),
        name="eth0",
        tiers=(TierInfo("default", (normal,), (normal,)),),
        untracked_tiers=(TierInfo("default", (untracked,), (untracked,)),),
        pre_dnat_tiers=(TierInfo("default", (predant,)),),
        forward_tiers=(TierInfo("default", (forward,), (forward,)),),
    )
    chains = []
    for v in (4, 6):
        base = _renderer(v)
        effective = host_effective_policy(hep, policies.get, lambda _: False)
        chains += base.host_endpoint_chains(hep, effective)
        chains += base.dispatch.hosts(["eth0"])
        host = HostPolicyRenderer(base)
        chains += host.raw_chains([(hep, effective)], policies)
        chains += host.mangle_chains([(hep, effective)], policies)
    _golden("host_endpoint.txt", _dump(chains))


def test_ipblock_with_except_uses_each_address_flag_once() -> None:
    """Kubernetes ipBlock + except: one -d and one negated -d on one rule."""
    for version, block, hole in ((4, "0.0.0.0/4", "10.67.1.3/32"), (6, "fd00::/8", "fd00::3/128")):
        renderer = _renderer(version)
        rules = renderer.out.rules(
            renderer.rules.render(
                Rule(Action.ALLOW, dst_nets=(block,), not_dst_nets=(hole,), src_nets=(block,))
            )
        )
        for r in rules:
            words = r.text().split()
            assert words.count("-d") <= 1 and words.count("-s") <= 1, r.text()
        # The final rule requires the block and the absence of the hole mark.
        marked = [r for r in rules if f"-d {hole}" in r.text()]
        assert len(marked) == 1 and "--set-xmark" in marked[0].action


def test_a_zero_prefix_is_every_address_of_its_family() -> None:
    # Wanted, it constrains nothing; unwanted, the rule never matches (and
    # nft refuses "! -s 0.0.0.0/0" at commit, though --test passes it).
    for version, zero, other in ((4, "0.0.0.0/0", "10.0.0.0/8"), (6, "::/0", "fd00::/8")):
        rules = _renderer(version).rules
        assert rules.render(Rule(Action.ALLOW, not_src_nets=(zero,))) == []
        assert rules.render(Rule(Action.ALLOW, not_dst_nets=(other, zero))) == []
        allow = rules.render(Rule(Action.ALLOW, src_nets=(zero, other), protocol="tcp"))
        assert allow == rules.render(Rule(Action.ALLOW, protocol="tcp"))
        # An endpoint allowed to spoof any source has no anti-spoofing rule.
        wep = WorkloadEndpoint(
            WorkloadEndpointKey("k8s", "ns/a", "eth0"),
            "cali1",
            allow_spoofed_source_prefixes=(zero,),
        )
        chains = _workload_chains(_renderer(version), wep, lambda _: True, lambda _: True)
        assert not any("-s " in r.text() for c in chains for r in c.rules)
    # The other family's /0 is vacuous for this one.
    v4 = _renderer(4).rules
    assert v4.render(Rule(Action.ALLOW, not_src_nets=("::/0",))) == v4.render(Rule(Action.ALLOW))


def test_comments_cannot_break_out_of_the_restore_line() -> None:
    hostile = 'x"\n-A FORWARD -m comment --comment "6.6.6.6" -j ACCEPT\\\x00é'
    line = render_rule("cali-x", IptRule("", "-j DROP", comment=f"tier {hostile}"), "h" * 16)
    assert "\n" not in line and "\x00" not in line
    assert line.count('"') == 4  # the hash comment's quotes and the label's
    assert safe_comment(safe_comment(hostile)) == safe_comment(hostile)


def test_masquerade_with_nat_port_range_names_a_port_protocol() -> None:
    chains = NatRenderer(
        4, ChainNames(), IptablesSerialiser(), "all", "masq", 0x100, (32768, 60999)
    ).chains([])
    for chain in chains:
        for r in chain.rules:
            if "--to-ports" in r.action:
                assert "-p tcp" in r.match or "-p udp" in r.match, r.text()


def test_a_host_endpoint_on_every_interface_is_the_dispatch_fallthrough() -> None:
    # Felix's "*" endpoint (name ""): interfaces without an endpoint of their
    # own reach it; there is no "-i " rule for it (the kernel refuses one).
    chains = {c.name: c for c in _renderer(4).dispatch.hosts(["", "eth0"])}
    root = chains["cali-from-host-endpoint"].rules
    assert [r.text() for r in root] == ["-i eth0 -g cali-fh-eth0", "-g cali-fh-"]
    assert chains["cali-to-host-endpoint"].rules[-1].text() == "-g cali-th-"
    for chain in chains.values():
        for rule in chain.rules:
            assert "-i  " not in f"{rule.text()} " and "-o  " not in f"{rule.text()} "


def test_host_endpoint_forward_chains_follow_felix() -> None:
    from dataplane.model import HostEndpoint, HostEndpointKey  # noqa: PLC0415

    forward = PolicyKey("fwd")
    policies = {forward: Policy("default", (Rule(Action.ALLOW, protocol="udp"),))}
    base = _renderer(4)

    def chains(hep: HostEndpoint) -> dict[str, list[str]]:
        effective = host_effective_policy(hep, policies.get, lambda _: False)
        rendered = base.host_endpoint_chains(hep, effective)
        return {c.name: [r.text() for r in c.rules] for c in rendered}

    # No forward policy: an endpoint still has forward chains, which allow,
    # so that it shadows an all-interfaces endpoint's forward policy.
    plain = chains(HostEndpoint(HostEndpointKey("a"), name="eth0"))
    assert plain["cali-fhfw-eth0"] == plain["cali-thfw-eth0"]
    assert plain["cali-fhfw-eth0"] == ["-j MARK --set-xmark 0x10000/0x10000"]
    # Ingress-only forward policy: egress stays allowed; ingress drops what
    # the tier did not allow, and a passing tier is no drop at all.
    for default, dropped in ((Action.DENY, True), (Action.PASS, False)):
        hep = HostEndpoint(
            HostEndpointKey("a"),
            name="eth0",
            forward_tiers=(TierInfo("default", (forward,), (), default),),
        )
        out = chains(hep)
        assert out["cali-thfw-eth0"] == plain["cali-thfw-eth0"]
        assert any("-j cali-pi-fwd" in r for r in out["cali-fhfw-eth0"])
        assert out["cali-fhfw-eth0"][-1].endswith("-j DROP") is dropped


def test_forwarded_traffic_meets_host_endpoints_around_workload_policy() -> None:
    # Felix's order: the arriving host endpoint, the workloads, the leaving
    # host endpoint; only then is workload traffic accepted.
    (forward,) = [c for c in _renderer(4).static_chains() if c.name == "cali-FORWARD"]
    texts = [r.text() for r in forward.rules]

    def at(fragment: str) -> int:
        return next(i for i, t in enumerate(texts) if fragment in t)

    assert (
        at("-j cali-from-hep-forward")
        < at("-i cali+ -j cali-from-wl-dispatch")
        < at("-o cali+ -j cali-to-wl-dispatch")
        < at("-j cali-to-hep-forward")
        < at("-i cali+ -j ACCEPT")
    )


def test_port_sets_never_match_a_protocol_without_ports() -> None:
    # Named-port and service sets hold TCP, UDP and SCTP members only.
    rules = _renderer(4).rules
    gre = Rule(Action.ALLOW, protocol="47")
    assert (
        rules.render(Rule(Action.ALLOW, protocol="47", dst_named_port_ip_set_ids=("n:http",))) == []
    )
    assert rules.render(Rule(Action.ALLOW, protocol="icmp", dst_ip_port_set_ids=("n:http",))) == []
    assert rules.render(
        Rule(Action.ALLOW, protocol="47", not_src_named_port_ip_set_ids=("n:http",))
    ) == rules.render(gre)
    # With a port protocol, or none, the lookup stays.
    assert rules.render(Rule(Action.ALLOW, dst_named_port_ip_set_ids=("n:http",))) != rules.render(
        Rule(Action.ALLOW)
    )
