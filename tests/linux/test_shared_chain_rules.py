"""Shared workload chains made from rules serialised once (nftables).

A writer keeps its serialised rules across endpoints and applies, and the
renderer keeps each policy's two tier rules; neither may change a chain.
Each chain made so is held to its model rules serialised by a fresh
renderer, one by one, and its name to the digest of its rules' tuple as
the chains in the kernel were always named (a restart must find them).
"""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.config import Config
from dataplane.linux.nftables.serialise import NftRule, NftSerialiser
from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.render.filter import FilterRenderer
from dataplane.linux.render.rule import RuleRenderer
from dataplane.linux.render.shared_workloads import (
    SerialisedRules,
    shared_workload_chains,
    shared_workload_rules,
)
from dataplane.linux.rules.marks import Marks
from dataplane.model import (
    Action,
    DirectionPolicy,
    EffectivePolicy,
    PolicyKey,
    TierPolicies,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)

_MARKS = Marks.from_mask(0xFFFF0000)
_NAMES = ChainNames()
# Names that fit a chain name, and ones that must be hashed into it.
_NAME = st.sampled_from(["allow-dns", "deny", "a" * 40, 'x" drop #', "knp.default.web"])
_SCOPE = st.sampled_from(["", "ns1", "team-b"])
_KEY = st.builds(PolicyKey, _NAME, _SCOPE, st.sampled_from(["", "gnp"]))
_TIER = st.builds(
    TierPolicies,
    st.sampled_from(["default", "security", "platform"]),
    st.lists(_KEY, max_size=4).map(tuple),
    st.sampled_from([Action.DENY, Action.PASS]),
)
_DIRECTION = st.builds(
    DirectionPolicy,
    st.lists(_TIER, max_size=3).map(tuple),
    st.lists(st.sampled_from(["kns.a", "ksa.a.b", "p" * 30]), max_size=2).map(tuple),
)
_POLICY = st.builds(EffectivePolicy, _DIRECTION, _DIRECTION)
_ENDPOINT = st.builds(
    WorkloadEndpoint,
    st.builds(
        WorkloadEndpointKey, st.just("k8s"), st.sampled_from(["ns/a", "ns/b"]), st.just("eth0")
    ),
    st.sampled_from(["cali0", "cali1", "cali2"]),
    state=st.sampled_from(["active", "down"]),
    ipv4_nets=st.sampled_from([(), ("10.65.0.1/32",)]),
)


def _renderer() -> FilterRenderer[NftRule]:
    rules = RuleRenderer(4, _MARKS, lambda *_: None, "calico-packet")
    return FilterRenderer(4, Config(), _MARKS, _NAMES, rules, NftSerialiser(4, _MARKS, "filter-"))


def _digest(rules: tuple[NftRule, ...]) -> str:
    return hashlib.sha256(repr(rules).encode()).hexdigest()[:16]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_ENDPOINT, _POLICY), min_size=1, max_size=12), st.integers(1, 40))
def test_chains_from_kept_rules_are_the_chains_a_fresh_renderer_makes(
    endpoints: list[tuple[WorkloadEndpoint, EffectivePolicy]], kept: int
) -> None:
    render = _renderer()
    serialised = SerialisedRules(render.out)
    serialised.LIMIT = kept  # emptied along the way, as on a large node
    for endpoint, policy in endpoints:
        chains = shared_workload_chains(render, endpoint, policy, serialised)
        assert len(serialised) <= kept
        fresh = _renderer()
        for chain, rules, inbound in zip(
            chains, shared_workload_rules(fresh, endpoint, policy), (True, False), strict=True
        ):
            assert chain.rules == fresh.out.rules(rules)
            assert chain.name == _NAMES.shared_workload(_digest(chain.rules), inbound)


def test_a_renderer_made_again_gets_rules_serialised_by_its_own_serialiser() -> None:
    """A writer's kept rules belong to one serialiser: a new config makes a
    new renderer, whose serialiser may spell the same rules otherwise."""
    endpoint = WorkloadEndpoint(WorkloadEndpointKey("k8s", "ns/a", "eth0"), "cali0")
    policy = EffectivePolicy(DirectionPolicy((TierPolicies("default", (PolicyKey("p"),)),)))
    first = _renderer()
    serialised = SerialisedRules(first.out)
    before = shared_workload_chains(first, endpoint, policy, serialised)
    rules = RuleRenderer(4, _MARKS, lambda *_: None, "calico-packet")
    other = FilterRenderer(4, Config(), _MARKS, _NAMES, rules, NftSerialiser(4, _MARKS, "raw-"))
    after = shared_workload_chains(other, endpoint, policy, serialised)
    assert after == shared_workload_chains(other, endpoint, policy) != before
