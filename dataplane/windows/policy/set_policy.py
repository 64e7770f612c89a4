"""IP sets as HNS ``SetPolicy`` objects on our networks (HNS 13.0 and later).

Where the host has them, an address set lives once per network and ACLs
name it by ``Id``: a member change is one ``ModifyNetwork`` per network and
no endpoint is touched. Ids are derived from the Felix set id (a GUID, so
no text from a message reaches HNS as an id), names label it for an
operator (the set id where it is plain, else a hash), and only sets whose
name carries our prefix are ever changed or removed.

Named-port sets (address, protocol, port) have no SetPolicy form; the
renderer expands them into ACLs wherever they are used. Felix never sends
nested sets, so ``NESTEDIPSET`` is never needed.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dataplane.model import IPSet, IPSetType
from dataplane.windows.hns.acl import comma_list
from dataplane.windows.hns.hcn import Json

__all__ = [
    "NAME_PREFIX",
    "SetPolicyChanges",
    "WantedSets",
    "set_policy",
    "set_policy_changes",
    "set_token",
    "wanted_sets",
]

NAME_PREFIX = "dataplane-"
_NAMESPACE = uuid.UUID("6f1b0f4e-61f6-4b1c-9a55-3c1f3b0d2f7e")
_PLAIN = re.compile(r"[A-Za-z0-9:._-]{1,64}")


def set_token(set_id: str) -> str:
    """The ``SetPolicy`` ``Id`` standing for Felix's set ``set_id``."""
    return str(uuid.uuid5(_NAMESPACE, set_id)).upper()


def _name(set_id: str) -> str:
    if _PLAIN.fullmatch(set_id):
        return NAME_PREFIX + set_id
    return NAME_PREFIX + hashlib.sha256(set_id.encode()).hexdigest()[:16]


def set_policy(ipset: IPSet) -> Json:
    """The network policy holding ``ipset`` (an address or network set)."""
    assert ipset.type is not IPSetType.IP_AND_PORT
    return {
        "Type": "SetPolicy",
        "Settings": {
            "Id": set_token(ipset.id),
            "Name": _name(ipset.id),
            "PolicyType": "IPSET",
            "Values": ",".join(sorted(ipset.members)),
        },
    }


@dataclass(frozen=True, slots=True)
class WantedSets:
    """The ``SetPolicy`` objects the desired sets render to, by ``Id``, and whose each is."""

    policies: dict[str, Json]
    owners: dict[str, str]  # Id -> Felix set id


def wanted_sets(sets: Iterable[IPSet]) -> WantedSets:
    """Every address or network set as its policy (named-port sets have none)."""
    policies: dict[str, Json] = {}
    owners: dict[str, str] = {}
    for ipset in sets:
        if ipset.type is not IPSetType.IP_AND_PORT:
            token = set_token(ipset.id)
            policies[token], owners[token] = set_policy(ipset), ipset.id
    return WantedSets(policies, owners)


SetPolicyChanges = dict[str, list[Json]]  # request type -> policies


def _value(policy: Json) -> tuple[str, frozenset[str]]:
    """What a set holds, however HNS orders or spaces its members."""
    settings = policy.get("Settings") or {}
    try:
        members = frozenset(comma_list(settings.get("Values"), "Values"))
    except ValueError:
        members = frozenset({repr(settings.get("Values"))})  # unreadable: differs from ours
    return str(settings.get("PolicyType")), members


def set_policy_changes(network: Json, wanted: Mapping[str, Json]) -> SetPolicyChanges:
    """``ModifyNetwork`` requests (by type) that make ``network``'s sets of ours ``wanted``.

    ``wanted`` maps ``Id`` to policy. New sets are added, changed ones
    updated (HNS replaces a set by Id), ours that are no longer wanted
    removed; sets of others are left alone.
    """
    current: dict[str, Json] = {}
    for policy in network.get("Policies") or ():
        settings = policy.get("Settings") or {}
        if policy.get("Type") == "SetPolicy" and str(settings.get("Name", "")).startswith(
            NAME_PREFIX
        ):
            current[str(settings.get("Id"))] = policy
    changes: SetPolicyChanges = {
        "Add": [p for token, p in wanted.items() if token not in current],
        "Update": [
            p
            for token, p in wanted.items()
            if token in current and _value(current[token]) != _value(p)
        ],
        "Remove": [p for token, p in current.items() if token not in wanted],
    }
    return {kind: policies for kind, policies in changes.items() if policies}
