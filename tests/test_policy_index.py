"""The managers' policy index: effective policy, reverse indexes, minimal changes.

A platform is handed an endpoint exactly when its value or its effective
policy changed, and a policy exactly when its rules must be rewritten; what
it holds after any sequence of changes equals resolving everything afresh.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.core.platform import EndpointKey
from dataplane.managers.index import PolicyIndex
from dataplane.managers.resolve import host_effective_policy, workload_effective_policy
from dataplane.model import (
    Action,
    DirectionPolicy,
    EffectivePolicy,
    HostEffectivePolicy,
    HostEndpoint,
    HostEndpointKey,
    Policy,
    PolicyKey,
    Profile,
    Rule,
    TierInfo,
    TierPolicies,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)

POLICIES = [PolicyKey(f"p{i}") for i in range(4)]
PROFILES = ["prof-a", "prof-b"]
SETS = ["s1", "s2"]


@dataclass
class Sink:
    """Records what a platform is handed, and holds the resulting state."""

    policies: dict[PolicyKey, Policy] = field(default_factory=dict)
    profiles: dict[str, Profile] = field(default_factory=dict)
    endpoints: dict[EndpointKey, tuple[object, object]] = field(default_factory=dict)
    sent_policies: list[PolicyKey] = field(default_factory=list)
    sent_endpoints: list[EndpointKey] = field(default_factory=list)

    def set_policy(self, key: PolicyKey, policy: Policy) -> None:
        self.policies[key] = policy
        self.sent_policies.append(key)

    def remove_policy(self, key: PolicyKey) -> None:
        del self.policies[key]
        self.sent_policies.append(key)

    def set_profile(self, profile_id: str, profile: Profile) -> None:
        self.profiles[profile_id] = profile

    def remove_profile(self, profile_id: str) -> None:
        del self.profiles[profile_id]

    def set_workload_endpoint(self, endpoint: WorkloadEndpoint, policy: EffectivePolicy) -> None:
        self.endpoints[endpoint.key] = (endpoint, policy)
        self.sent_endpoints.append(endpoint.key)

    def remove_workload_endpoint(self, key: WorkloadEndpointKey) -> None:
        del self.endpoints[key]
        self.sent_endpoints.append(key)

    def set_host_endpoint(self, endpoint: HostEndpoint, policy: HostEffectivePolicy) -> None:
        self.endpoints[endpoint.key] = (endpoint, policy)
        self.sent_endpoints.append(endpoint.key)

    def remove_host_endpoint(self, key: HostEndpointKey) -> None:
        del self.endpoints[key]
        self.sent_endpoints.append(key)

    def flush(self, index: PolicyIndex) -> None:
        index.flush_rules(self)
        index.flush_endpoints(self)


def _policy(set_id: str | None = None, *, untracked: bool = False) -> Policy:
    rule = Rule(Action.ALLOW, src_ip_set_ids=(set_id,) if set_id else ())
    return Policy("default", (rule,), untracked=untracked)


def _wep(name: str, *policies: PolicyKey, profiles: tuple[str, ...] = ()) -> WorkloadEndpoint:
    return WorkloadEndpoint(
        WorkloadEndpointKey("k8s", name, "eth0"),
        f"cali{name}",
        profile_ids=profiles,
        tiers=(TierInfo("default", policies, policies, Action.DENY),),
    )


def test_effective_policy_keeps_active_policies_in_order_and_drops_empty_tiers() -> None:
    a, b, c = POLICIES[:3]
    tiers = (TierInfo("sec", (a, b), (c,), Action.PASS), TierInfo("default", (c,), (a,)))
    endpoint = WorkloadEndpoint(
        WorkloadEndpointKey("k8s", "x", "eth0"), "calix", profile_ids=("p", "q"), tiers=tiers
    )
    got = workload_effective_policy(endpoint, {a, b}.__contains__, {"q"}.__contains__)
    assert got == EffectivePolicy(
        DirectionPolicy((TierPolicies("sec", (a, b), Action.PASS),), ("q",)),
        DirectionPolicy((TierPolicies("default", (a,), Action.DENY),), ("q",)),
    )


def test_untracked_tiers_count_only_untracked_policies() -> None:
    a, b = POLICIES[:2]
    policies = {a: _policy(untracked=True), b: _policy()}
    hep = HostEndpoint(
        HostEndpointKey("h"),
        "eth0",
        untracked_tiers=(TierInfo("default", (a, b), (a, b)),),
        tiers=(TierInfo("default", (a, b), ()),),
    )
    got = host_effective_policy(hep, policies.get, lambda _: True)
    assert got.untracked.ingress.tiers == (TierPolicies("default", (a,)),)
    assert got.normal.ingress.tiers == (TierPolicies("default", (a, b)),)


def test_a_policy_change_touches_only_what_it_must() -> None:
    index, sink = PolicyIndex(), Sink()
    a, b = POLICIES[:2]
    index.set_policy(a, _policy("s1"))
    index.set_endpoint(_wep("one").key, _wep("one", a, b))
    index.set_endpoint(_wep("two").key, _wep("two", a))
    sink.flush(index)
    assert sorted(sink.sent_endpoints) == [_wep("one").key, _wep("two").key]
    sink.sent_policies.clear()
    sink.sent_endpoints.clear()

    # New rules for an active policy: its chains only, no endpoint.
    index.set_policy(a, _policy("s2"))
    sink.flush(index)
    assert (sink.sent_policies, sink.sent_endpoints) == ([a], [])

    # b becomes active: only the endpoint naming it resolves anew.
    index.set_policy(b, _policy())
    sink.flush(index)
    assert sink.sent_endpoints == [_wep("one").key]

    # A set that a rule uses changes shape: that policy is rewritten.
    sink.sent_policies.clear()
    index.ip_set_changed_shape("s2")
    index.ip_set_changed_shape("s1")  # no longer used by anything
    sink.flush(index)
    assert sink.sent_policies == [a]

    # A batch that ends where it began sends nothing.
    sink.sent_policies.clear()
    sink.sent_endpoints.clear()
    index.set_policy(b, None)
    index.set_policy(b, _policy())
    sink.flush(index)
    assert (sink.sent_policies, sink.sent_endpoints) == ([], [])


def test_reverse_indexes() -> None:
    index = PolicyIndex()
    a, b = POLICIES[:2]
    index.set_policy(a, _policy("s1"))
    index.set_profile("prof-a", Profile((Rule(Action.ALLOW, dst_ip_set_ids=("s2",)),)))
    one, two = _wep("one", a, profiles=("prof-a",)), _wep("two", b)
    index.set_endpoint(one.key, one)
    index.set_endpoint(two.key, two)
    assert index.endpoints_using_policy(a) == {one.key}
    assert index.endpoints_using_policy(b) == {two.key}  # named, not yet active
    assert index.endpoints_using_profile("prof-a") == {one.key}
    assert index.endpoints_using_sets(["s1"]) == {one.key}
    assert index.endpoints_using_sets(["s2", "nope"]) == {one.key}
    index.set_endpoint(one.key, None)
    assert index.endpoints_using_sets(["s1", "s2"]) == set()


_ops = st.one_of(
    st.tuples(st.just("policy"), st.sampled_from(POLICIES), st.sampled_from([None, *SETS, "-"])),
    st.tuples(st.just("profile"), st.sampled_from(PROFILES), st.booleans()),
    st.tuples(
        st.just("endpoint"),
        st.sampled_from(["e1", "e2", "e3"]),
        st.one_of(
            st.none(),
            st.tuples(
                st.lists(st.sampled_from(POLICIES), max_size=3, unique=True),
                st.lists(st.sampled_from(PROFILES), max_size=2, unique=True),
            ),
        ),
    ),
    st.tuples(st.just("set"), st.sampled_from(SETS), st.none()),
    st.tuples(st.just("flush"), st.none(), st.none()),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_ops, max_size=40))
def test_what_the_platform_holds_equals_resolving_afresh(ops: list[tuple[object, ...]]) -> None:
    index, sink = PolicyIndex(), Sink()
    policies: dict[PolicyKey, Policy] = {}
    profiles: dict[str, Profile] = {}
    endpoints: dict[EndpointKey, WorkloadEndpoint] = {}
    held_before: dict[EndpointKey, tuple[object, object]] = {}

    def flush_and_check() -> None:
        nonlocal held_before
        sink.sent_endpoints.clear()
        sink.flush(index)
        expected = {
            key: (wep, workload_effective_policy(wep, policies.__contains__, profiles.__contains__))
            for key, wep in endpoints.items()
        }
        assert sink.endpoints == expected
        assert sink.policies == policies and sink.profiles == profiles
        # Exactly the endpoints that changed were sent, each once.
        changed = {
            k for k in expected.keys() | held_before.keys() if expected.get(k) != held_before.get(k)
        }
        assert sorted(sink.sent_endpoints, key=str) == sorted(changed, key=str)
        held_before = dict(expected)

    for kind, name, arg in ops:
        if kind == "policy":
            assert isinstance(name, PolicyKey)
            policy = None if arg is None else _policy(None if arg == "-" else str(arg))
            index.set_policy(name, policy)
            if policy is None:
                policies.pop(name, None)
            else:
                policies[name] = policy
        elif kind == "profile":
            assert isinstance(name, str)
            profile = Profile() if arg else None
            index.set_profile(name, profile)
            if profile is None:
                profiles.pop(name, None)
            else:
                profiles[name] = profile
        elif kind == "endpoint":
            assert isinstance(name, str)
            key = _wep(name).key
            if arg is None:
                index.set_endpoint(key, None)
                endpoints.pop(key, None)
            else:
                assert isinstance(arg, tuple)
                wep = _wep(name, *arg[0], profiles=tuple(arg[1]))
                index.set_endpoint(key, wep)
                endpoints[key] = wep
        elif kind == "set":
            index.ip_set_changed_shape(str(name))
        else:
            flush_and_check()
    flush_and_check()
