"""HostEndpointWriter: host endpoint chains in filter, raw and mangle.

Filter holds each host endpoint's normal and forward chains and their
dispatch; raw holds untracked policy and mangle pre-DNAT policy, with the
chains of the policies marked so. All of them are few, so they are
rewritten whole whenever a host endpoint or a policy they use changes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from dataplane.linux.render.hostpolicy import HostPolicyRenderer
from dataplane.linux.writers.groups import ChainGroups
from dataplane.linux.writers.target import R, Target
from dataplane.model import HostEffectivePolicy, HostEndpoint, HostEndpointKey, Policy, PolicyKey

__all__ = ["HostEndpointWriter"]

log = logging.getLogger(__name__)


class HostEndpointWriter:
    def __init__(self) -> None:
        self._endpoints: dict[HostEndpointKey, tuple[HostEndpoint, HostEffectivePolicy]] = {}
        # Untracked and pre-DNAT policies: their chains live in raw/mangle.
        self._stage_policies: dict[PolicyKey, Policy] = {}
        self._dirty = True
        self._groups = ChainGroups()

    def __iter__(self) -> Iterator[tuple[HostEndpointKey, HostEndpoint]]:
        for key, (endpoint, _) in self._endpoints.items():
            yield key, endpoint

    def get(self, key: HostEndpointKey) -> HostEndpoint | None:
        entry = self._endpoints.get(key)
        return entry[0] if entry else None

    def set(self, endpoint: HostEndpoint, policy: HostEffectivePolicy) -> None:
        self._endpoints[endpoint.key] = (endpoint, policy)
        self._dirty = True

    def remove(self, key: HostEndpointKey) -> None:
        if self._endpoints.pop(key, None) is not None:
            self._dirty = True

    def policy_changed(self, key: PolicyKey, policy: Policy | None) -> None:
        """Any policy's new value: only untracked and pre-DNAT ones matter here."""
        staged = policy is not None and (policy.untracked or policy.pre_dnat)
        if key not in self._stage_policies and not staged:
            return
        if staged:
            assert policy is not None
            self._stage_policies[key] = policy
        else:
            del self._stage_policies[key]
        self._dirty = True

    def active(self) -> list[tuple[HostEndpoint, HostEffectivePolicy]]:
        """The endpoint that polices each interface ("": every other one).

        Two endpoints may name one interface; as in Felix, the one with the
        lowest id wins, so the choice does not depend on arrival order.
        """
        best: dict[str, tuple[HostEndpoint, HostEffectivePolicy]] = {}
        for key in sorted(self._endpoints):
            endpoint, policy = self._endpoints[key]
            if endpoint.name in best:
                log.warning(
                    "host endpoint %s is shadowed by %s on interface %s",
                    key,
                    best[endpoint.name][0].key,
                    endpoint.name or "*",
                )
                continue
            best[endpoint.name] = (endpoint, policy)
        return [best[name] for name in sorted(best)]

    def write(self, target: Target[R], everything: bool) -> None:
        if not (everything or self._dirty):
            return
        endpoints = self.active()
        for version in target.versions:
            base = target.renderer("filter", version)
            chains = []
            for endpoint, policy in endpoints:
                chains += base.host_endpoint_chains(endpoint, policy)
            chains += base.dispatch.hosts(h.name for h, _ in endpoints)
            self._groups.set(target.table("filter", version), "host-endpoints", chains)
            raw = HostPolicyRenderer(target.renderer("raw", version))
            mangle = HostPolicyRenderer(target.renderer("mangle", version))
            for table, render, staged in (
                ("raw", raw, raw.raw_chains(endpoints, self._stage_policies)),
                ("mangle", mangle, mangle.mangle_chains(endpoints, self._stage_policies)),
            ):
                programmer = target.table(table, version)
                # A group, not the whole table: the mangle table holds DSCP's chains too.
                self._groups.set(programmer, "host-endpoints", staged)
                for builtin, rules in render.hooks(table).items():
                    programmer.set_hooks(builtin, rules)
        self._dirty = False
