"""What the managers keep is bounded by what the node holds, however long the churn.

A node under churn sees hundreds of thousands of distinct rules, policy
names, set ids and endpoints over its life, and holds a few hundred of each
at any time (``benchmarks/bench_soak.py`` measures it on the real kernel).
The converter's memos and the policy index's reverse indexes must follow
the live objects, not the history.
"""

from __future__ import annotations

import gc
from typing import Any

from dataplane.managers import EndpointManager, PolicyManager, convert
from dataplane.managers.index import PolicyIndex
from dataplane.model import PolicyKey
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb

LIVE_POLICIES = 10
RULES_PER_POLICY = 4
CHURN = 2_000  # policy updates, every one with rules never seen before


def _policy(name: str, first_port: int) -> pb.ActivePolicyUpdate:
    rules = [
        pb.Rule(
            action="allow",
            protocol=pb.Protocol(name="tcp"),
            src_ip_set_ids=[f"s:set-{first_port + k}"],
            dst_ports=[pb.PortRange(first=first_port + k, last=first_port + k)],
        )
        for k in range(RULES_PER_POLICY)
    ]
    return pb.ActivePolicyUpdate(
        id=pb.PolicyID(name=name, namespace="ns"),
        policy=pb.Policy(tier="default", inbound_rules=rules),
    )


def _endpoint(i: int, policy: str) -> pb.WorkloadEndpointUpdate:
    return pb.WorkloadEndpointUpdate(
        id=pb.WorkloadEndpointID(orchestrator_id="k8s", workload_id=f"ns/pod-{i}", endpoint_id="e"),
        endpoint=pb.WorkloadEndpoint(
            name=f"cali{i:011d}",
            profile_ids=[f"kns.ns-{i}"],
            tiers=[
                pb.TierInfo(
                    name="default",
                    ingress_policies=[pb.PolicyID(name=policy, namespace="ns")],
                )
            ],
        ),
    )


def _memo_size(memo: convert._Memo[Any]) -> int:
    gc.collect()  # other tests' garbage goes first; ours is freed without it
    return len(memo)


def test_the_rule_memo_holds_only_the_rules_of_live_policies() -> None:
    before = _memo_size(convert._RULES)
    platform = SimPlatform()
    manager = PolicyManager(platform, PolicyIndex())
    for i in range(CHURN):
        manager.on_update(_policy(f"p{i % LIVE_POLICIES}", 1000 + i * RULES_PER_POLICY))
        if i % 7 == 0:  # an apply now and then, as the loop makes them
            manager.complete_deferred_work()
    manager.complete_deferred_work()
    live = LIVE_POLICIES * RULES_PER_POLICY
    assert len(platform.desired.policies) == LIVE_POLICIES
    # Without the bound this held every one of the 8,000 rules seen (up to 50,000).
    assert len(convert._RULES) - before <= live


def test_the_rule_memo_still_converts_a_resent_rule_once() -> None:
    platform = SimPlatform()
    manager = PolicyManager(platform, PolicyIndex())
    manager.on_update(_policy("p", 7000))
    manager.complete_deferred_work()
    first = platform.desired.policies[PolicyKey("p", "ns")]
    # Felix re-sends the whole policy when a rule changes: the others are reused.
    update = _policy("p", 7000)
    update.policy.inbound_rules[0].dst_ports[0].first = 9
    update.policy.inbound_rules[0].dst_ports[0].last = 9
    manager.on_update(update)
    manager.complete_deferred_work()
    second = platform.desired.policies[PolicyKey("p", "ns")]
    assert second.inbound[0] != first.inbound[0]
    assert all(a is b for a, b in zip(first.inbound[1:], second.inbound[1:], strict=True))


def test_the_rule_memo_forgets_a_removed_policy() -> None:
    platform = SimPlatform()
    manager = PolicyManager(platform, PolicyIndex())
    before = _memo_size(convert._RULES)
    manager.on_update(_policy("gone", 8000))
    manager.complete_deferred_work()
    assert len(convert._RULES) == before + RULES_PER_POLICY
    manager.on_update(pb.ActivePolicyRemove(id=pb.PolicyID(name="gone", namespace="ns")))
    manager.complete_deferred_work()
    assert len(convert._RULES) == before


def test_the_tier_memo_holds_only_the_tiers_of_live_endpoints() -> None:
    before = _memo_size(convert._TIERS)
    platform = SimPlatform()
    manager = EndpointManager(platform, PolicyIndex())
    endpoints = 10
    for i in range(CHURN):
        # Each update names a policy no endpoint named before: a new tier.
        manager.on_update(_endpoint(i % endpoints, f"policy-{i}"))
        if i % 7 == 0:
            manager.complete_deferred_work()
    manager.complete_deferred_work()
    assert len(convert._TIERS) - before <= endpoints


def test_the_policy_index_forgets_names_and_sets_that_are_gone() -> None:
    index = PolicyIndex()
    platform = SimPlatform()
    policies = PolicyManager(platform, index)
    endpoints = EndpointManager(platform, index)
    for i in range(CHURN):
        name = f"p{i}"  # every policy, set and endpoint a new one
        policies.on_update(_policy(name, 20_000 + i * RULES_PER_POLICY))
        endpoints.on_update(_endpoint(i, name))
        if i >= LIVE_POLICIES:  # the oldest goes, as pods and their policies do
            old = i - LIVE_POLICIES
            endpoints.on_update(
                pb.WorkloadEndpointRemove(
                    id=pb.WorkloadEndpointID(
                        orchestrator_id="k8s", workload_id=f"ns/pod-{old}", endpoint_id="e"
                    )
                )
            )
            policies.on_update(
                pb.ActivePolicyRemove(id=pb.PolicyID(name=f"p{old}", namespace="ns"))
            )
        policies.complete_deferred_work()
        endpoints.complete_deferred_work()
    live_sets = LIVE_POLICIES * RULES_PER_POLICY
    assert len(index._set_policies) == live_sets
    assert len(index._policy_users) == LIVE_POLICIES
    assert len(index._profile_users) == LIVE_POLICIES
