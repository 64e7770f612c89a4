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

from dataplane.linux.filter_render import FilterRenderer
from dataplane.linux.iptables import Chain, IptRule
from dataplane.linux.marks import clear_mark, has_mark
from dataplane.model import HostEndpoint, Policy, PolicyKey, TierInfo

__all__ = ["HostPolicyRenderer"]


@dataclass(frozen=True, slots=True)
class HostPolicyRenderer:
    base: FilterRenderer

    def _endpoint_chains(
        self,
        kind: str,
        endpoints: Sequence[HostEndpoint],
        tiers_of: Callable[[HostEndpoint], tuple[TierInfo, ...]],
        inbound: bool,
        known: Callable[[PolicyKey], bool],
    ) -> tuple[list[Chain], list[str]]:
        names = self.base.names
        chains = []
        ifaces = []
        for hep in endpoints:
            tiers = tiers_of(hep)
            if not tiers:
                continue
            rules = self.base.tiered_rules(
                tiers,
                inbound,
                (),
                known,
                lambda _: False,
                enforce=False,
            )
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
        self, endpoints: Sequence[HostEndpoint], policies: Mapping[PolicyKey, Policy]
    ) -> list[Chain]:
        m = self.base.marks
        n = self.base.names
        known = lambda k: k in policies and policies[k].untracked  # noqa: E731
        ingress, in_ifaces = self._endpoint_chains(
            "fhu", endpoints, lambda h: h.untracked_tiers, True, known
        )
        egress, out_ifaces = self._endpoint_chains(
            "thu", endpoints, lambda h: h.untracked_tiers, False, known
        )
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
        self, endpoints: Sequence[HostEndpoint], policies: Mapping[PolicyKey, Policy]
    ) -> list[Chain]:
        m = self.base.marks
        n = self.base.names
        known = lambda k: k in policies and policies[k].pre_dnat  # noqa: E731
        ingress, ifaces = self._endpoint_chains(
            "fhp", endpoints, lambda h: h.pre_dnat_tiers, True, known
        )
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
