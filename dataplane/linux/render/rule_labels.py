"""Which policy rule each iptables rule of the filter table was rendered from.

The policy counters (:mod:`dataplane.ops.policy_counters`) read the
kernel's own per-rule counters with ``iptables-save -c`` in the metrics
server's thread; this is the map they name them by, computed on the main
loop after each apply and published whole, never changed after:
``(IP version, chain) -> rule hash -> RuleLabel``. Keyed by the rule's hash
comment (which covers the chain, the rule and every rule before it), a
counter is only ever attributed to exactly the rule we wrote: a chain the
kernel holds in another version (quarantined, or rewritten since) simply
matches nothing.

What is labelled:

* policy and profile chains: for each model rule, the one iptables rule
  that carries its verdict (:func:`~dataplane.linux.render.rule.verdict_index`),
  labelled with the policy's tier, the policy (``str`` of its key) or
  profile id, the direction and the rule's index in the message;
  profiles have the tier :data:`PROFILE_TIER`, which no tier name can be
  (Kubernetes names are lower case);
* endpoint chains (workload and host endpoints, and host endpoints'
  forward chains): each tier's end-of-tier drop (the tier's name,
  no policy, rule :data:`END_OF_TIER_RULE`), and the final drop of what
  no policy or profile allowed (tier :data:`PROFILE_TIER`, same rule).

Incremental: the tables report which chains changed and the platform
which policies and profiles did, so an apply costs in proportion to what
it changed, not to what the node holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from dataplane.linux.iptables.chains import IptRule
from dataplane.linux.iptables.table import Table
from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.render.filter import END_OF_TIER, NOTHING_ALLOWED
from dataplane.linux.render.rule import RuleRenderer, verdict_index
from dataplane.model import Policy, PolicyKey, Profile, Rule

__all__ = ["END_OF_TIER_RULE", "PROFILE_TIER", "RuleLabel", "RuleLabels", "RuleMap", "model_labels"]

PROFILE_TIER = "__PROFILE__"
END_OF_TIER_RULE = "end-of-tier"


@dataclass(frozen=True, slots=True, order=True)
class RuleLabel:
    """The policy rule behind one iptables rule, as the metrics label it."""

    tier: str
    policy: str  # "" for an end-of-tier drop
    direction: str  # "inbound" or "outbound"
    rule: str  # the rule's index in the message, or END_OF_TIER_RULE
    action: str  # allow, deny, pass, log


# (IP version, chain) -> rule hash -> label.
RuleMap = Mapping[tuple[int, str], Mapping[str, RuleLabel]]


@dataclass(frozen=True, slots=True)
class _Owner:
    key: PolicyKey | str  # a policy's key, or a profile's id
    inbound: bool


def model_labels(  # noqa: PLR0917 - each argument is one part of the label
    tier: str,
    policy: str,
    direction: str,
    model_rules: Sequence[Rule],
    render: RuleRenderer,
    rules: Sequence[IptRule],
    hashes: Sequence[str],
) -> dict[str, RuleLabel] | None:
    """Labels of a policy or profile chain's verdict rules, by hash.

    ``rules`` must be exactly the rendering of ``model_rules`` (as owners.py
    maps a refused rule back); None if it is not, and nothing is labelled.
    """
    out: dict[str, RuleLabel] = {}
    start = 0
    for index, rule in enumerate(model_rules):
        rendered = render.render(rule)
        end = start + len(rendered)
        if tuple(rendered) != tuple(rules[start:end]):
            return None
        if rendered:
            at = start + verdict_index(rule.action, rendered)
            out[hashes[at]] = RuleLabel(tier, policy, direction, str(index), rule.action.value)
        start = end
    return out if start == len(rules) else None


def end_of_tier_labels(
    direction: str, rules: Sequence[IptRule], hashes: Sequence[str]
) -> dict[str, RuleLabel]:
    """Labels of an endpoint chain's end-of-tier and final drops, by hash."""
    out: dict[str, RuleLabel] = {}
    for rule, rule_hash in zip(rules, hashes, strict=True):
        if rule.comment.startswith(END_OF_TIER):
            tier = rule.comment[len(END_OF_TIER) :]
        elif rule.comment == NOTHING_ALLOWED:
            tier = PROFILE_TIER
        else:
            continue
        out[rule_hash] = RuleLabel(tier, "", direction, END_OF_TIER_RULE, "deny")
    return out


class RuleLabels:
    """Keeps the :data:`RuleMap` of the filter tables, updated after each apply."""

    def __init__(self, names: ChainNames) -> None:
        self._names = names
        self._all = True  # first update: every policy and profile
        self._policies: set[PolicyKey] = set()
        self._profiles: set[str] = set()
        self._owners: dict[str, _Owner] = {}  # policy and profile chains
        self._labels: dict[tuple[int, str], Mapping[str, RuleLabel]] = {}
        self.published: RuleMap = MappingProxyType({})
        p = names.prefix
        # Endpoint chains by name: to/from workload, from/to host endpoint,
        # a host endpoint's forward chains (see filter_render).
        self._directions = (
            (f"{p}tw-", "inbound"),
            (f"{p}fw-", "outbound"),
            (f"{p}fh-", "inbound"),
            (f"{p}th-", "outbound"),
            (f"{p}fhfw-", "inbound"),
            (f"{p}thfw-", "outbound"),
        )

    def policy_changed(self, key: PolicyKey) -> None:
        self._policies.add(key)

    def profile_changed(self, name: str) -> None:
        self._profiles.add(name)

    def update(
        self,
        tables: Mapping[int, Table],
        renderers: Mapping[int, RuleRenderer],
        policies: Mapping[PolicyKey, Policy],
        profiles: Mapping[str, Profile],
    ) -> RuleMap:
        """Label what changed in the filter ``tables`` (by IP version); the new map."""
        changed = {version: table.take_changed() for version, table in tables.items()}
        if self._all:
            self._policies |= policies.keys()
            self._profiles |= profiles.keys()
            self._all = False
        touched: set[str] = set()
        n = self._names
        for key in self._policies:
            for inbound in (True, False):
                touched.add(self._own(n.policy(key, inbound), key, inbound, key in policies))
        for name in self._profiles:
            for inbound in (True, False):
                touched.add(self._own(n.profile(name, inbound), name, inbound, name in profiles))
        self._policies.clear()
        self._profiles.clear()
        dirty = False
        for version, chains in changed.items():
            for chain in chains | touched:
                labels = self._chain(chain, tables[version], renderers[version], policies, profiles)
                if labels:
                    self._labels[(version, chain)] = MappingProxyType(labels)
                    dirty = True
                elif self._labels.pop((version, chain), None) is not None:
                    dirty = True
        if dirty:
            self.published = MappingProxyType(dict(self._labels))
        return self.published

    def _own(self, chain: str, key: PolicyKey | str, inbound: bool, wanted: bool) -> str:
        if wanted:
            self._owners[chain] = _Owner(key, inbound)
        else:
            self._owners.pop(chain, None)
        return chain

    def _chain(
        self,
        chain: str,
        table: Table,
        render: RuleRenderer,
        policies: Mapping[PolicyKey, Policy],
        profiles: Mapping[str, Profile],
    ) -> dict[str, RuleLabel] | None:
        desired = table.desired(chain)
        if desired is None:
            return None
        rules, hashes = desired
        owner = self._owners.get(chain)
        if owner is not None:
            direction = "inbound" if owner.inbound else "outbound"
            if isinstance(owner.key, PolicyKey):
                policy = policies.get(owner.key)
                if policy is None:
                    return None
                model = policy.inbound if owner.inbound else policy.outbound
                tier, name = policy.tier, str(owner.key)
            else:
                profile = profiles.get(owner.key)
                if profile is None:
                    return None
                model = profile.inbound if owner.inbound else profile.outbound
                tier, name = PROFILE_TIER, owner.key
            return model_labels(tier, name, direction, model, render, rules, hashes)
        for prefix, direction in self._directions:
            if chain.startswith(prefix):
                return end_of_tier_labels(direction, rules, hashes)
        return None
