"""A decision's trace in words: each step a line, indented by its depth, and
where a decision was made.
"""

from __future__ import annotations

from dataplane.ops.evaluate import Step, Where

__all__ = ["NO_POLICY", "describe", "step_line"]

NO_POLICY = "no local endpoint's policy applies"

_INDENT = "  "
_DEPTH = {
    "direction": 0,
    "tier": 1,
    "policy": 2,
    "end-of-tier": 2,
    "profile": 1,
    "default": 1,
    "admin-down": 1,
    "spoofed-source": 1,
    "no-backends": 1,
    "no-local-backends": 1,
    "source-range": 1,
    "unenforceable": 1,
}
_MATCHED = {
    "allow": "matched: allow",
    "deny": "matched: deny",
    "log": "matched: log, goes on",
}


def _depth(step: Step) -> int:
    if step.kind == "rule":
        depth = 3 if step.at.policy is not None else 2
    else:
        depth = _DEPTH.get(step.kind, 0)
    return depth + (1 if step.at.backend is not None and step.kind != "backend" else 0)


def _line(step: Step) -> str:
    at = step.at
    if step.kind == "direction":
        return f"{at.direction} policy of workload {at.endpoint} ({step.note})"
    if step.kind == "tier":
        return f"tier {at.tier} ({step.note})"
    if step.kind == "policy":
        return f"policy {at.policy} ({step.note})"
    if step.kind == "profile":
        return f"profile {at.profile.name if at.profile else ''}"
    if step.kind == "rule":
        return f"rule {_rule_index(at)}: {step.note} -> {_rule_outcome(step)}"
    if step.kind == "backend":
        return f"backend {at.backend}: {step.note}"
    return step.note + (f" -> {step.outcome}" if step.outcome else "")


def _rule_index(at: Where) -> object:
    return at.profile.rule if at.profile is not None else at.rule


def _rule_outcome(step: Step) -> str:
    if step.outcome == "no-match":
        return f"no match ({step.mismatch})"
    if step.outcome == "pass":
        in_profile = step.at.profile is not None
        return (
            "matched: pass, ends the profile" if in_profile else "matched: pass, to the next tier"
        )
    return _MATCHED.get(step.outcome or "", str(step.outcome))


def describe(at: Where) -> str:
    """A decision's place in words: ``ingress of k8s/ns/pod/eth0, tier t, policy p, rule 0``."""
    if at.direction == "none":
        return NO_POLICY if at.backend is None else f"backend {at.backend}, {NO_POLICY}"
    parts = [f"{at.direction} of {at.endpoint}" if at.endpoint else at.direction]
    if at.backend is not None:
        parts.insert(0, f"backend {at.backend}")
    if at.tier is not None:
        parts.append(f"tier {at.tier}")
    if at.policy is not None:
        parts.append(f"policy {at.policy}")
    if at.profile is not None:
        parts.append(f"profile {at.profile.name}, rule {at.profile.rule}")
    elif isinstance(at.rule, int):
        parts.append(f"rule {at.rule}")
    elif at.rule is not None:
        parts.append(at.rule)
    return ", ".join(parts)


def step_line(step: Step) -> str:
    """One step of a trace as a line of ``explain``'s text, indented by its depth."""
    return _INDENT * _depth(step) + _line(step)
