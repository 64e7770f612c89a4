"""How HNS merges a modify request's policies into an object's. Pure.

``ModifyEndpoint``'s Update replaces every policy of the types it carries
(a whole ACL list at once), Add appends, Remove removes each named one;
``ModifyNetwork`` knows SetPolicy sets by ``Id`` (Add refuses a taken
one, Update replaces one) and other policies by value. A policy to
remove that is not there is HNS's ``HCN_E_POLICY_NOT_FOUND``.
"""

from __future__ import annotations

from collections.abc import Callable

from dataplane.windows.hns.hcn import ERROR_ALREADY_EXISTS, HCN_E_POLICY_NOT_FOUND, HcnError, Json
from dataplane.windows.sim.simhost_rules import set_id

__all__ = ["merged_endpoint", "merged_network"]


def _remove(
    current: list[Json], gone: list[Json], same: Callable[[Json, Json], bool], call: str
) -> list[Json]:
    remaining = list(current)
    for policy in gone:
        match = next((p for p in remaining if same(p, policy)), None)
        if match is None:
            raise HcnError(call, "", HCN_E_POLICY_NOT_FOUND, f"no such policy {policy!r}"[:200])
        remaining.remove(match)
    return remaining


def merged_endpoint(current: list[Json], kind: str, policies: list[Json]) -> list[Json]:
    """Update replaces every policy of the types it carries: a whole ACL list at once."""
    if kind == "Add":
        return [*current, *policies]
    if kind == "Update":
        types = {p.get("Type") for p in policies}
        return [p for p in current if p.get("Type") not in types] + policies
    return _remove(current, policies, lambda a, b: a == b, "ModifyEndpoint")


def merged_network(current: list[Json], kind: str, policies: list[Json]) -> list[Json]:
    """Sets are known by ``Id`` (Add refuses a taken one, Update replaces one); others by value."""

    def same(a: Json, b: Json) -> bool:
        return a == b if set_id(b) is None else set_id(a) == set_id(b)

    if kind == "Remove":
        return _remove(current, policies, same, "ModifyNetwork")
    if kind == "Update":
        remaining = _remove(current, policies, same, "ModifyNetwork")
        return [*remaining, *policies]
    for policy in policies:
        if any(same(p, policy) for p in current):
            raise HcnError("ModifyNetwork", "", ERROR_ALREADY_EXISTS, f"{policy!r}"[:200])
    return [*current, *policies]
