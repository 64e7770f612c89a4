"""Raw and mangle tables: untracked and pre-DNAT host endpoint policy.

Pure. Felix's semantics:

* **Untracked** policy (raw table, PREROUTING and OUTPUT) runs before
  connection tracking. What it allows is marked NOTRACK and skips normal
  policy (the filter table accepts untracked packets that carry our accept
  mark); what it denies is dropped; what it does not decide goes on to
  normal policy. Being untracked, replies need their own allow.
* **Pre-DNAT** policy (mangle PREROUTING) sees inbound packets before any
  DNAT, so it can police node ports by their original destination. It
  drops what it denies and lets everything else go on to normal policy.

Both apply only to host endpoints, never to traffic from workloads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from dataplane.linux.render.filter import ESTABLISHED, FilterRenderer
from dataplane.linux.rules.action import Accept, Jump, Notrack, Return, SetMark
from dataplane.linux.rules.chain import Chain
from dataplane.linux.rules.match import ConnState, Interface, MarkMatch
from dataplane.linux.rules.rule import TableRule
from dataplane.model import (
    EffectivePolicy,
    HostEffectivePolicy,
    HostEndpoint,
    Policy,
    PolicyKey,
    TierInfo,
)

__all__ = ["HostPolicyEndpoint", "HostPolicyRenderer"]

# A host endpoint with the policy the managers resolved for it.
HostPolicyEndpoint = tuple[HostEndpoint, HostEffectivePolicy]


# An endpoint has an untracked (pre-DNAT) chain when it names untracked
# (pre-DNAT) tiers at all, whether or not their policies are active yet.
def _untracked(
    hep: HostEndpoint, policy: HostEffectivePolicy
) -> tuple[tuple[TierInfo, ...], EffectivePolicy]:
    if not hep.name:
        # Felix ignores untracked policy on an all-interfaces endpoint (it
        # logs and drops it); so do we, so the same messages mean the same.
        return (), policy.untracked
    return hep.untracked_tiers, policy.untracked


def _pre_dnat(
    hep: HostEndpoint, policy: HostEffectivePolicy
) -> tuple[tuple[TierInfo, ...], EffectivePolicy]:
    return hep.pre_dnat_tiers, policy.pre_dnat


R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class HostPolicyRenderer(Generic[R]):
    """Host endpoint policy in raw and mangle, spelled as ``base`` spells the filter table."""

    base: FilterRenderer[R]

    def _endpoint_chains(
        self,
        kind: str,
        endpoints: Sequence[HostPolicyEndpoint],
        stage: Callable[[HostEndpoint, HostEffectivePolicy], tuple[object, EffectivePolicy]],
        inbound: bool,
    ) -> tuple[list[Chain[R]], list[str]]:
        names = self.base.names
        chains = []
        ifaces = []
        for hep, policy in endpoints:
            tiers, effective = stage(hep, policy)
            if not tiers:
                continue
            rules = self.base.tiered_rules(effective.direction(inbound), inbound, enforce=False)
            chains.append(self._chain(names.dispatch_child(kind, hep.name), rules))
            ifaces.append(hep.name)
        return chains, ifaces

    def _chain(self, name: str, rules: Iterable[TableRule]) -> Chain[R]:
        return Chain(name, self.base.out.rules(rules))

    def _dispatch(
        self, root: str, kind: str, inbound: bool, ifaces: Iterable[str]
    ) -> list[Chain[R]]:
        names = self.base.names
        return self.base.dispatch.tree(
            names.top(root),
            kind + "d",
            inbound,
            ifaces,
            lambda i: names.dispatch_child(kind, i),
            TableRule((), Return()),
        )

    def _policies(
        self, policies: Mapping[PolicyKey, Policy], wanted: Callable[[Policy], bool]
    ) -> list[Chain[R]]:
        chains: list[Chain[R]] = []
        for key, policy in policies.items():
            if wanted(policy):
                chains += self.base.policy_chains(key, policy)
        return chains

    def raw_chains(
        self, endpoints: Sequence[HostPolicyEndpoint], policies: Mapping[PolicyKey, Policy]
    ) -> list[Chain[R]]:
        m = self.base.marks
        n = self.base.names
        ingress, in_ifaces = self._endpoint_chains("fhu", endpoints, _untracked, True)
        egress, out_ifaces = self._endpoint_chains("thu", endpoints, _untracked, False)
        accepted = MarkMatch.has(m.accept)
        allowed = [TableRule((accepted,), Notrack()), TableRule((accepted,), Accept())]
        prerouting = [
            *self._from_workloads(),
            TableRule((), SetMark.off(m.all)),
            TableRule((), Jump(n.top("untracked-in"))),
            *allowed,
        ]
        output = [
            TableRule((), SetMark.off(m.all)),
            TableRule((), Jump(n.top("untracked-out"))),
            *allowed,
        ]
        return [
            self._chain(n.top("PREROUTING"), prerouting),
            self._chain(n.top("OUTPUT"), output),
            *self._dispatch("untracked-in", "fhu", True, in_ifaces),
            *self._dispatch("untracked-out", "thu", False, out_ifaces),
            *ingress,
            *egress,
            *self._policies(policies, lambda p: p.untracked),
        ]

    def mangle_chains(
        self, endpoints: Sequence[HostPolicyEndpoint], policies: Mapping[PolicyKey, Policy]
    ) -> list[Chain[R]]:
        m = self.base.marks
        n = self.base.names
        ingress, ifaces = self._endpoint_chains("fhp", endpoints, _pre_dnat, True)
        prerouting = [
            ESTABLISHED,
            # Untracked policy already decided these; keep its accept mark.
            TableRule((ConnState(("UNTRACKED",)),), Return()),
            *self._from_workloads(),
            TableRule((), SetMark.off(m.all)),
            TableRule((), Jump(n.top("pre-dnat"))),
            TableRule((MarkMatch.has(m.accept),), Accept()),
        ]
        return [
            self._chain(n.top("PREROUTING"), prerouting),
            *self._dispatch("pre-dnat", "fhp", True, ifaces),
            *ingress,
            *self._policies(policies, lambda p: p.pre_dnat),
        ]

    def _from_workloads(self) -> list[TableRule]:
        """Host endpoint policy is not for traffic from workloads."""
        return [
            TableRule((Interface(f"{p}+", inbound=True),), Return())
            for p in self.base.config.interface_prefixes
        ]

    def hooks(self, table: str) -> Mapping[str, tuple[R, ...]]:
        n = self.base.names
        builtins = ("PREROUTING", "OUTPUT") if table == "raw" else ("PREROUTING",)
        return {b: self.base.out.rules([TableRule((), Jump(n.top(b)))]) for b in builtins}
