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

from dataplane.linux.iptables.chains import Chain, IptRule
from dataplane.linux.iptables.marks import clear_mark, has_mark
from dataplane.linux.render.filter import FilterRenderer
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


@dataclass(frozen=True, slots=True)
class HostPolicyRenderer:
    base: FilterRenderer

    def _endpoint_chains(
        self,
        kind: str,
        endpoints: Sequence[HostPolicyEndpoint],
        stage: Callable[[HostEndpoint, HostEffectivePolicy], tuple[object, EffectivePolicy]],
        inbound: bool,
    ) -> tuple[list[Chain], list[str]]:
        names = self.base.names
        chains = []
        ifaces = []
        for hep, policy in endpoints:
            tiers, effective = stage(hep, policy)
            if not tiers:
                continue
            rules = self.base.tiered_rules(effective.direction(inbound), inbound, enforce=False)
            chains.append(Chain(names.dispatch_child(kind, hep.name), tuple(rules)))
            ifaces.append(hep.name)
        return chains, ifaces

    def _dispatch(self, root: str, kind: str, flag: str, ifaces: Iterable[str]) -> list[Chain]:
        names = self.base.names
        return self.base.dispatch_chains(
            names.top(root),
            kind + "d",
            flag,
            ifaces,
            lambda i: names.dispatch_child(kind, i),
            IptRule("", "-j RETURN"),
        )

    def _policies(
        self, policies: Mapping[PolicyKey, Policy], wanted: Callable[[Policy], bool]
    ) -> list[Chain]:
        chains: list[Chain] = []
        for key, policy in policies.items():
            if wanted(policy):
                chains += self.base.policy_chains(key, policy)
        return chains

    def raw_chains(
        self, endpoints: Sequence[HostPolicyEndpoint], policies: Mapping[PolicyKey, Policy]
    ) -> list[Chain]:
        m = self.base.marks
        n = self.base.names
        ingress, in_ifaces = self._endpoint_chains("fhu", endpoints, _untracked, True)
        egress, out_ifaces = self._endpoint_chains("thu", endpoints, _untracked, False)
        allowed = [
            IptRule(has_mark(m.accept), "-j NOTRACK"),
            IptRule(has_mark(m.accept), "-j ACCEPT"),
        ]
        prerouting = [
            *(IptRule(f"-i {p}+", "-j RETURN") for p in self.base.config.interface_prefixes),
            IptRule("", clear_mark(m.all)),
            IptRule("", f"-j {n.top('untracked-in')}"),
            *allowed,
        ]
        output = [
            IptRule("", clear_mark(m.all)),
            IptRule("", f"-j {n.top('untracked-out')}"),
            *allowed,
        ]
        return [
            Chain(n.top("PREROUTING"), tuple(prerouting)),
            Chain(n.top("OUTPUT"), tuple(output)),
            *self._dispatch("untracked-in", "fhu", "-i", in_ifaces),
            *self._dispatch("untracked-out", "thu", "-o", out_ifaces),
            *ingress,
            *egress,
            *self._policies(policies, lambda p: p.untracked),
        ]

    def mangle_chains(
        self, endpoints: Sequence[HostPolicyEndpoint], policies: Mapping[PolicyKey, Policy]
    ) -> list[Chain]:
        m = self.base.marks
        n = self.base.names
        ingress, ifaces = self._endpoint_chains("fhp", endpoints, _pre_dnat, True)
        prerouting = [
            IptRule("-m conntrack --ctstate RELATED,ESTABLISHED", "-j ACCEPT"),
            # Untracked policy already decided these; keep its accept mark.
            IptRule("-m conntrack --ctstate UNTRACKED", "-j RETURN"),
            *(IptRule(f"-i {p}+", "-j RETURN") for p in self.base.config.interface_prefixes),
            IptRule("", clear_mark(m.all)),
            IptRule("", f"-j {n.top('pre-dnat')}"),
            IptRule(has_mark(m.accept), "-j ACCEPT"),
        ]
        return [
            Chain(n.top("PREROUTING"), tuple(prerouting)),
            *self._dispatch("pre-dnat", "fhp", "-i", ifaces),
            *ingress,
            *self._policies(policies, lambda p: p.pre_dnat),
        ]

    def hooks(self, table: str) -> Mapping[str, tuple[IptRule, ...]]:
        n = self.base.names
        builtins = ("PREROUTING", "OUTPUT") if table == "raw" else ("PREROUTING",)
        return {b: (IptRule("", f"-j {n.top(b)}"),) for b in builtins}
