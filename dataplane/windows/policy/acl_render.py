"""An endpoint's effective policy as one ordered list of HNS ACLs (pure).

HNS gives the lowest ``Priority`` among the matching rules; Calico takes the
first decisive rule through tiers, ``pass``, tier default actions and
profiles. The renderer makes the two agree:

1. Each tier, then each profile, then a final deny is a *stage* of items:
   decide (Allow/Block with a match) or pass (go to the next stage).
   A tier ends in its default action (Deny, or Pass); a profile's ``pass``
   and its end go on to the next profile (Felix's semantics, as in
   ``tests/reference_eval.py``).
2. Stages are flattened as Felix does: each pass item is replaced by the
   flattened rest, each entry restricted to the pass item's match (exact
   intersection, :mod:`dataplane.windows.policy.match`).
3. Priorities count up from 1000 and change exactly when the action does,
   so no Allow and Block that could match the same packet ever share one;
   a host-to-endpoint allow sits at 900 ahead of all policy (kubelet
   probes), as Felix does.

Both directions are always rendered in full, ending in an explicit deny (or
an earlier unconditional decision): any ACL makes HNS default-deny the
endpoint in both directions, so nothing is left to that default.

Where HNS cannot be exact the result fails closed and says so
(:class:`FailClosed`): an allow that cannot be expressed is left out, a deny
is widened, a pass that cannot be expressed becomes a widened deny. The
``log`` action has no HNS form and no effect on a verdict; it is reported.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from dataplane.model import Action, DirectionPolicy, IPSet, Policy, PolicyKey, Profile, Rule
from dataplane.windows.policy.acl_policy import Acl, branch_acls
from dataplane.windows.policy.addresses import AddressSet
from dataplane.windows.policy.match import ANY, Branch, Compiled, SetView, Side, compile_rule

__all__ = [
    "BASE_PRIORITY",
    "HOST_PRIORITY",
    "MAX_PRIORITY",
    "DirectionAcls",
    "FailClosed",
    "RenderContext",
    "render_direction",
    "render_host_rule",
]

HOST_PRIORITY = 900
BASE_PRIORITY = 1000
MAX_PRIORITY = 65000
# Flattening pass rules multiplies entries; past this many the rest of the
# list is one deny (fail closed) rather than an ACL list HNS cannot hold.
MAX_ENTRIES = 20_000


@dataclass(frozen=True, slots=True)
class FailClosed:
    """A rule HNS cannot express exactly, and what the renderer did instead."""

    origin: str  # "ingress tier security policy p rule 2"
    action: str  # the rule's action
    what: tuple[str, ...]  # the inexact parts
    result: str  # "left out" | "widened" | "widened to deny"

    def __str__(self) -> str:
        return f"{self.origin} ({self.action}): {', '.join(self.what)} -> {self.result}"


@dataclass(frozen=True, slots=True)
class DirectionAcls:
    acls: tuple[Acl, ...]
    fail_closed: tuple[FailClosed, ...] = ()


@dataclass(frozen=True)
class RenderContext:
    """Everything rendering depends on besides the endpoint's effective policy.

    One context serves one apply: the rules of a policy used by many
    endpoints are compiled once (``_compiled``) and each set is parsed once
    (``_set_view``), which only holds because
    nothing it depends on changes while the context lives.
    """

    policies: Mapping[PolicyKey, Policy]
    profiles: Mapping[str, Profile]
    sets: Mapping[str, IPSet]
    versions: tuple[int, ...] = (4,)
    # The SetPolicy id standing for a set where the host keeps sets as objects.
    token: Callable[[str], str | None] = field(default=lambda set_id: None)
    _compiled: dict[tuple[Rule, bool], Compiled] = field(default_factory=dict, compare=False)

    @functools.cached_property
    def _set_view(self) -> SetView:
        return SetView(self.sets, self.token)

    def compile(self, rule: Rule, *, widen: bool = False) -> Compiled:
        found = self._compiled.get((rule, widen))
        if found is None:
            found = compile_rule(rule, self._set_view, self.versions, widen=widen)
            self._compiled[(rule, widen)] = found
        return found


@dataclass(frozen=True, slots=True)
class _Item:
    action: str  # "Allow" | "Block" | "Pass"
    branches: tuple[Branch, ...]
    origin: str

    @property
    def unconditional(self) -> bool:
        return ANY in self.branches


def _rule_item(
    rule: Rule, origin: str, context: RenderContext, notes: list[FailClosed]
) -> _Item | None:
    action = rule.action
    if action is Action.LOG:
        notes.append(FailClosed(origin, "log", ("no HNS logging",), "left out"))
        return None
    exact = context.compile(rule)
    if not exact.inexact:
        kind = {Action.ALLOW: "Allow", Action.DENY: "Block", Action.PASS: "Pass"}[action]
        return _Item(kind, exact.branches, origin)
    if action is Action.ALLOW:
        notes.append(FailClosed(origin, action.value, exact.inexact, "left out"))
        return None
    wide = context.compile(rule, widen=True)
    result = "widened" if action is Action.DENY else "widened to deny"
    notes.append(FailClosed(origin, action.value, exact.inexact, result))
    return _Item("Block", wide.branches, origin)


def _stages(
    policy: DirectionPolicy, inbound: bool, context: RenderContext, notes: list[FailClosed]
) -> list[list[_Item]]:
    way = "ingress" if inbound else "egress"
    stages: list[list[_Item]] = []
    for tier in policy.tiers:
        items: list[_Item] = []
        present = [k for k in tier.policies if k in context.policies]
        if not present:
            continue  # as Felix: a tier with no policy in force is skipped
        for key in present:
            p = context.policies[key]
            for index, rule in enumerate(p.inbound if inbound else p.outbound):
                origin = f"{way} tier {tier.name} policy {key} rule {index}"
                if (item := _rule_item(rule, origin, context, notes)) is not None:
                    items.append(item)
        end = "Pass" if tier.default_action is Action.PASS else "Block"
        items.append(_Item(end, (ANY,), f"{way} end of tier {tier.name}"))
        stages.append(items)
    for name in policy.profiles:
        profile = context.profiles.get(name)
        if profile is None:
            continue
        items = []
        for index, rule in enumerate(profile.inbound if inbound else profile.outbound):
            origin = f"{way} profile {name} rule {index}"
            if (item := _rule_item(rule, origin, context, notes)) is not None:
                items.append(item)
        stages.append(items)  # a profile's end goes on to the next one
    stages.append([_Item("Block", (ANY,), f"{way} default deny")])
    return stages


def _flatten(stages: list[list[_Item]]) -> list[_Item]:
    """One first-match list: each pass replaced by the rest, restricted to its match."""
    rest: list[_Item] = []
    for stage in reversed(stages):
        flat: list[_Item] = []
        # A stage that ends without deciding falls through to the next one.
        for item in [*stage, _Item("Pass", (ANY,), "")]:
            if item.action != "Pass":
                flat.append(item)
            elif item.unconditional:
                flat.extend(rest)
            else:
                for entry in rest:
                    branches = tuple(
                        c for b in entry.branches for p in item.branches if (c := b & p) is not None
                    )
                    if branches:
                        flat.append(_Item(entry.action, branches, entry.origin))
            if item.unconditional:
                break
            if len(flat) > MAX_ENTRIES:
                flat.append(_Item("Block", (ANY,), "too many rules after flattening tiers"))
                break
        rest = flat
    return rest


def render_direction(
    policy: DirectionPolicy, inbound: bool, context: RenderContext
) -> DirectionAcls:
    """``policy`` for one direction of one endpoint as ordered ACLs."""
    notes: list[FailClosed] = []
    entries = _flatten(_stages(policy, inbound, context, notes))
    acls: list[Acl] = []
    priority, previous = BASE_PRIORITY, None
    for entry in entries:
        if previous is not None and entry.action != previous:
            priority += 1
        if priority >= MAX_PRIORITY and not (entry.unconditional and entry.action == "Block"):
            way = "ingress" if inbound else "egress"
            notes.append(FailClosed(f"{way} {entry.origin}", "any", ("priorities",), "denied"))
            acls.extend(branch_acls(ANY, "Block", inbound, MAX_PRIORITY))
            break
        previous = entry.action
        for branch in entry.branches:
            acls.extend(branch_acls(branch, entry.action, inbound, priority))
        if entry.unconditional:
            break
    return DirectionAcls(tuple(dict.fromkeys(acls)), tuple(dict.fromkeys(notes)))


def render_host_rule(host_addresses: tuple[str, ...], versions: tuple[int, ...]) -> tuple[Acl, ...]:
    """The host's own addresses may always reach its endpoints (kubelet probes)."""
    found = [AddressSet.of(v, host_addresses) for v in versions]
    return tuple(
        acl
        for addresses in found
        if addresses
        for acl in branch_acls(Branch(None, Side(addresses), Side()), "Allow", True, HOST_PRIORITY)
    )
