"""Felix's policy semantics, evaluated in plain Python with every step recorded.

What the renderers must mean, written the simplest way that could be right:
no marks, no chains, no kernel. It is the engine of ``explain`` and the
tests' reference at once (``tests/reference_eval.py`` re-exports it): the
kernel differential tests and the Windows simulated-host tests compare real
verdicts with this module's, so an ``explain`` answer is the answer a
programmed node gives.

Semantics (Felix's; see ``dataplane/linux/render/rule.py`` and
``render/filter.py`` for how the Linux platform expresses them):

* A rule matches when every field it sets matches (fields AND). Within a
  positive field the values OR (any of the CIDRs, any port range or named
  port); a negated field matches only if none of its values does. IP set
  fields are the exception: each listed set must match (``src_ip_set_ids``
  ANDs set by set), and each negated set must not.
* Only the packet's own family counts: a positive CIDR list with no CIDR of
  that family cannot match; negated CIDRs of the other family are vacuous.
* ``ip_version`` restricts the family; ``protocol`` / ``not_protocol``
  compare protocol numbers (``icmp`` is 1, ``icmpv6`` 58).
* Port ranges and named ports (``ip,proto:port`` set members, matching
  address, protocol and port together) OR within one direction; a packet
  without ports (ICMP) never matches a positive port field and always
  satisfies a negated one.
* An IP set that does not exist is an empty set: a positive match on it
  fails, a negated one holds.
* An endpoint's decision for one direction: tiers in order, skipping tiers
  with no policy for that direction; in a tier, policies in order, rules in
  order: ``allow`` allows, ``deny`` drops, ``pass`` skips to the next tier,
  ``log`` goes on. A tier no rule decided ends in its default action (Deny
  drops, Pass goes on). Then (or with no tier at all) profiles in order:
  ``allow`` allows, ``deny`` drops, ``pass`` ends that profile. Nothing
  allowed: dropped.
* A workload's egress first drops sources that are not its own addresses
  (or an allowed spoofed prefix); an inactive endpoint drops everything.

Which tiers and profiles count is the managers' resolution
(:mod:`dataplane.managers.resolve`: active policies only, staged ones never),
so this module evaluates the same :class:`DirectionPolicy` a platform renders.

Trace model: every decision carries the :class:`Step` values that led to it,
in evaluation order, and a :class:`Where` naming the step that decided.
Invariant: the deciding step is among the steps, with the verdict as its
outcome. Pure: no I/O, frozen values out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from dataplane.managers.resolve import workload_effective_policy
from dataplane.model import (
    PROTOCOL_NUMBERS,
    Action,
    DirectionPolicy,
    Rule,
    TierPolicies,
    WorkloadEndpoint,
)
from dataplane.ops.rule_match import (
    Packet,
    PolicyState,
    describe_rule,
    in_any,
    rule_matches,
    rule_mismatch,
)

__all__ = [
    "PROTOCOL_NUMBERS",
    "Decision",
    "Direction",
    "Packet",  # re-exported: explain's and the tests' one door to the evaluator
    "PolicyState",
    "ProfileRef",
    "Step",
    "Where",
    "describe_rule",
    "direction_decision",
    "endpoint_decision",
    "forward_decision",
    "in_any",
    "join",
    "resolved_policy",
    "rule_matches",
    "rule_mismatch",
]

Direction = Literal["ingress", "egress"]
# Where a decision can come from besides an endpoint's two directions: the
# service frontend (kube-proxy's rejects), or nowhere ("none": no local
# endpoint's policy applies).
Stage = Literal["ingress", "egress", "service", "none"]
# The ``rule`` of a decision that no numbered policy rule made.
# fmt: off
RuleLabel = Literal[
    "end-of-tier", "profile", "default", "admin-down", "spoofed-source", "not-policed",
    "endpoint-to-host", "no-backends", "no-local-backends", "source-range", "unenforceable",
    "qos",
]
StepKind = Literal[
    "direction", "admin-down", "spoofed-source", "tier", "policy", "rule", "end-of-tier",
    "profile", "default", "not-policed", "no-policy", "endpoint-to-host", "not-evaluated",
    "service", "backend", "no-backends", "no-local-backends", "source-range", "unenforceable",
    "qos",
]
# fmt: on
Outcome = Literal["allow", "deny", "pass", "log", "no-match"]

_OUTCOMES: dict[Action, Outcome] = {
    Action.ALLOW: "allow",
    Action.DENY: "deny",
    Action.PASS: "pass",
    Action.LOG: "log",
}
# --- the trace ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProfileRef:
    """A profile, and a rule index in it when a rule is meant."""

    name: str
    rule: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"name": self.name} if self.rule is None else {"name": self.name, "rule": self.rule}


@dataclass(frozen=True, slots=True)
class Where:
    """Where on a packet's path a step happened (or a decision was made).

    ``endpoint`` is the workload endpoint's key as text; ``policy`` a
    :class:`PolicyKey` as text; ``rule`` a rule's index in its policy, or a
    :data:`RuleLabel` for decisions no numbered policy rule made (a
    profile's rule: ``rule="profile"`` with ``profile`` naming it and its
    index); ``backend`` the ``address:port`` a service sent the packet to.
    """

    direction: Stage = "none"
    endpoint: str | None = None
    tier: str | None = None
    policy: str | None = None
    rule: int | RuleLabel | None = None
    profile: ProfileRef | None = None
    backend: str | None = None

    def to_json(self) -> dict[str, object]:
        """Every key, null where it does not apply (the ``decided_by`` shape)."""
        return {
            "direction": self.direction,
            "endpoint": self.endpoint,
            "tier": self.tier,
            "policy": self.policy,
            "rule": self.rule,
            "profile": None if self.profile is None else self.profile.to_json(),
            "backend": self.backend,
        }


@dataclass(frozen=True, slots=True)
class Step:
    """One thing evaluation did, where, and what came of it.

    ``outcome`` is set on rule steps (``no-match`` or the matched rule's
    action) and on every step that decides or passes; ``mismatch`` names the
    first rule field the packet failed; ``note`` says the rest in words (a
    rule step's note is its rule, described when asked for: evaluation is
    the tests' reference and stays cheap).
    """

    kind: StepKind
    at: Where
    outcome: Outcome | None = None
    note_text: str = ""
    mismatch: str | None = None
    evaluated: Rule | None = None  # the rule a rule step looked at

    @property
    def note(self) -> str:
        return describe_rule(self.evaluated) if self.evaluated is not None else self.note_text

    def to_json(self) -> dict[str, object]:
        """The step's kind, then only the keys that apply (``Where``'s names)."""
        out: dict[str, object] = {"kind": self.kind}
        out.update({k: v for k, v in self.at.to_json().items() if v is not None})
        if self.at.direction == "none":
            del out["direction"]
        if self.outcome is not None:
            out["outcome"] = self.outcome
        if self.mismatch is not None:
            out["mismatch"] = self.mismatch
        if self.note:
            out["note"] = self.note
        return out


@dataclass(frozen=True, slots=True)
class Decision:
    """A verdict, the reason for it in one line, where it was made, and the steps.

    ``reason`` is stable text tests print (``ingress cali-b: tier t policy
    ... rule 2 (allow)``); ``by`` is the same as a structured value.
    """

    allowed: bool
    reason: str
    by: Where = Where()
    steps: tuple[Step, ...] = ()

    @property
    def direction(self) -> Stage:
        return self.by.direction

    @property
    def tier(self) -> str | None:
        return self.by.tier

    @property
    def policy(self) -> str | None:
        return self.by.policy

    @property
    def rule(self) -> int | RuleLabel | None:
        return self.by.rule

    def __str__(self) -> str:
        return f"{'allow' if self.allowed else 'drop'} ({self.reason})"


# --- one direction of one endpoint --------------------------------------------------------


def _first_decisive(
    rules: Sequence[Rule],
    packet: Packet,
    state: PolicyState,
    at: Where,
    steps: list[Step],
    *,
    profile: str | None = None,
) -> tuple[int, Action] | None:
    """Index and action of the first matching allow/deny/pass rule (log goes on).

    Records a step per rule looked at; in a profile, ``at`` names it by
    ``ProfileRef`` rather than by policy index.
    """
    for index, rule in enumerate(rules):
        where = (
            replace(at, rule=index)
            if profile is None
            else replace(at, rule="profile", profile=ProfileRef(profile, index))
        )
        miss = rule_mismatch(rule, packet, state)
        if miss is not None:
            steps.append(Step("rule", where, "no-match", mismatch=miss, evaluated=rule))
            continue
        steps.append(Step("rule", where, _OUTCOMES[rule.action], evaluated=rule))
        if rule.action is not Action.LOG:
            return index, rule.action
    return None


def _tier(
    tier: TierPolicies,
    packet: Packet,
    state: PolicyState,
    *,
    inbound: bool,
    at: Where,
    steps: list[Step],
) -> tuple[Action, Where] | None:
    """ALLOW/DENY and where, or None when the tier passed (a pass rule or its default)."""
    steps.append(Step("tier", at, note_text=f"default action {tier.default_action.value}"))
    for key in tier.policies:
        policy = state.policies.get(key)
        if policy is None:  # resolved against a newer state; nothing to evaluate
            continue
        rules = policy.inbound if inbound else policy.outbound
        where = replace(at, policy=str(key))
        steps.append(Step("policy", where, note_text=f"{len(rules)} rule(s)"))
        hit = _first_decisive(rules, packet, state, where, steps)
        if hit is None:
            continue
        index, action = hit
        if action is Action.PASS:
            return None
        return action, replace(where, rule=index)
    end = replace(at, rule="end-of-tier")
    if tier.default_action is Action.DENY:
        steps.append(Step("end-of-tier", end, "deny", "no policy in the tier decided"))
        return Action.DENY, end
    steps.append(Step("end-of-tier", end, "pass", "no policy decided; the tier passes"))
    return None


def _reason(label: str, action: Action, by: Where) -> str:
    """The one-line reason tests print, from where the decision was made."""
    if by.rule == "end-of-tier":
        return f"{label}: end of tier {by.tier}"
    if by.profile is not None:
        return f"{label}: profile {by.profile.name} rule {by.profile.rule} ({action.value})"
    return f"{label}: tier {by.tier} policy {by.policy} rule {by.rule} ({action.value})"


def direction_decision(
    endpoint: WorkloadEndpoint,
    direction: Direction,
    policy: DirectionPolicy,
    packet: Packet,
    state: PolicyState,
    *,
    backend: str | None = None,
) -> Decision:
    """What ``policy`` (``endpoint``'s resolved policy for ``direction``) decides.

    ``backend`` only labels the steps (the service backend this path leads to).
    """
    inbound = direction == "ingress"
    label = f"{direction} {endpoint.name}"
    base = Where(direction, str(endpoint.key), backend=backend)
    steps = [Step("direction", base, note_text=f"interface {endpoint.name}")]

    def decided(allowed: bool, reason: str, by: Where) -> Decision:
        return Decision(allowed, reason, by, tuple(steps))

    if not endpoint.admin_up:
        by = replace(base, rule="admin-down")
        steps.append(Step("admin-down", by, "deny", f"endpoint is {endpoint.state}"))
        return decided(False, f"{label}: endpoint is {endpoint.state}", by)
    if not inbound:
        own = (*endpoint.ipv4_nets, *endpoint.ipv6_nets, *endpoint.allow_spoofed_source_prefixes)
        if not in_any(packet.src, own):
            by = replace(base, rule="spoofed-source")
            note = f"source {packet.src} is not one of the endpoint's addresses"
            steps.append(Step("spoofed-source", by, "deny", note))
            return decided(False, f"{label}: source is not the endpoint's", by)
    for tier in policy.tiers:
        decided_here = _tier(
            tier, packet, state, inbound=inbound, at=replace(base, tier=tier.name), steps=steps
        )
        if decided_here is not None:
            action, by = decided_here
            return decided(action is Action.ALLOW, _reason(label, action, by), by)
    for name in policy.profiles:
        profile = state.profiles.get(name)
        if profile is None:
            continue
        at = replace(base, profile=ProfileRef(name))
        steps.append(Step("profile", at))
        rules = profile.inbound if inbound else profile.outbound
        hit = _first_decisive(rules, packet, state, base, steps, profile=name)
        if hit is None or hit[1] is Action.PASS:
            continue
        index, action = hit
        by = replace(base, rule="profile", profile=ProfileRef(name, index))
        return decided(action is Action.ALLOW, _reason(label, action, by), by)
    by = replace(base, rule="default")
    steps.append(Step("default", by, "deny", "no policy or profile allowed it"))
    return decided(False, f"{label}: no policy or profile allowed it", by)


def resolved_policy(
    endpoint: WorkloadEndpoint, direction: Direction, state: PolicyState
) -> DirectionPolicy:
    """``endpoint``'s policy for ``direction`` against ``state``, as the managers resolve it."""
    effective = workload_effective_policy(
        endpoint, state.policies.__contains__, state.profiles.__contains__
    )
    return effective.direction(direction == "ingress")


def endpoint_decision(
    endpoint: WorkloadEndpoint, direction: Direction, packet: Packet, state: PolicyState
) -> Decision:
    """What ``endpoint``'s policy decides for ``packet`` in ``direction``."""
    policy = resolved_policy(endpoint, direction, state)
    return direction_decision(endpoint, direction, policy, packet, state)


def join(first: Decision, second: Decision) -> Decision:
    """Two gates in a row: the first's drop stands; else the second decides, both traced."""
    if not first.allowed:
        return first
    steps = first.steps + second.steps
    if not second.allowed:
        return replace(second, steps=steps)
    return Decision(True, f"{first.reason}; {second.reason}", second.by, steps)


def forward_decision(
    src: WorkloadEndpoint, dst: WorkloadEndpoint, packet: Packet, state: PolicyState
) -> Decision:
    """A new flow between two workloads on one node: the source's egress, then
    the destination's ingress; both must allow."""
    egress = endpoint_decision(src, "egress", packet, state)
    if not egress.allowed:
        return egress
    return join(egress, endpoint_decision(dst, "ingress", packet, state))
