"""Which desired object a chain belongs to: names for quarantine reports.

The kernel refuses chains; operators act on policies, profiles, endpoints
and services. This maps one back to the other (pure, and only run when
something was refused, so a linear scan is fine), with the endpoints whose
status must say ``error`` (looked up in the managers' reverse indexes)
and, for policy and profile chains, the index of the message's rule that
the refused iptables rule was rendered from (its origin).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from dataplane.core.platform import EndpointKey, PolicyUsers
from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.rules.rule import Origin
from dataplane.model import (
    HostEndpoint,
    HostEndpointKey,
    Policy,
    PolicyKey,
    Profile,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)
from dataplane.model.services import ServiceKey

__all__ = ["ChainOwner", "find_owner"]


@dataclass(frozen=True, slots=True)
class ChainOwner:
    """The object a chain was rendered from.

    Attributes:
        kind: "policy", "profile", "workload endpoint", "host endpoint",
            "service" or "chain" (our own static or dispatch chains).
        name: the object's name as the messages gave it.
        endpoints: endpoints whose traffic the chain decides.
        rule_index: index in the message's rule list (inbound or outbound,
            as ``direction`` says) of the refused rule, when known.
        direction: "inbound"/"outbound" for policy and profile chains.
    """

    kind: str
    name: str
    endpoints: frozenset[EndpointKey] = frozenset()
    rule_index: int | None = None
    direction: str = ""

    def describe(self) -> str:
        where = f" {self.direction} rule {self.rule_index}" if self.rule_index is not None else ""
        return f"{self.kind} {self.name}{where}"


def _rule_index(origin: Origin | None) -> int | None:
    """The message's index of the policy rule behind a refused rule."""
    return int(origin.rule) if origin is not None and origin.rule.isdigit() else None


def find_owner(
    chain: str,
    origin: Origin | None,
    *,
    names: ChainNames,
    policies: Mapping[PolicyKey, Policy],
    profiles: Mapping[str, Profile],
    workloads: Iterable[tuple[WorkloadEndpointKey, WorkloadEndpoint]],
    hosts: Iterable[tuple[HostEndpointKey, HostEndpoint]],
    users: PolicyUsers,
    service_of: Callable[[str], ServiceKey | None],
    sharing: Callable[[str], frozenset[WorkloadEndpointKey]] = lambda _: frozenset(),
) -> ChainOwner:
    """The object ``chain`` was rendered from (see :class:`ChainOwner`);
    ``sharing`` names the workload endpoints whose shared chain it is
    (nftables)."""
    for key in policies:
        for inbound in (True, False):
            if names.policy(key, inbound) == chain:
                return ChainOwner(
                    "policy",
                    str(key),
                    users.endpoints_using_policy(key),
                    _rule_index(origin),
                    "inbound" if inbound else "outbound",
                )
    for name in profiles:
        for inbound in (True, False):
            if names.profile(name, inbound) == chain:
                return ChainOwner(
                    "profile",
                    name,
                    users.endpoints_using_profile(name),
                    _rule_index(origin),
                    "inbound" if inbound else "outbound",
                )
    for wkey, wep in workloads:
        if chain in (names.to_workload(wep.name), names.from_workload(wep.name)):
            return ChainOwner("workload endpoint", str(wkey), frozenset({wkey}))
    shared = sharing(chain)
    if shared:
        # One chain for every endpoint with this policy: the first names it.
        first = min(shared, key=str)
        more = f" and {len(shared) - 1} more" if len(shared) > 1 else ""
        return ChainOwner("workload endpoint", f"{first}{more}", shared)
    for hkey, hep in hosts:
        if hep.name and chain.endswith(f"-{hep.name}"):
            return ChainOwner("host endpoint", str(hkey), frozenset({hkey}))
    service = service_of(chain)
    if service is not None:
        return ChainOwner("service", str(service))
    return ChainOwner("chain", chain)
