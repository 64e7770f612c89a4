"""Egress DSCP marking of workload and host endpoints (``qos_policies``), as mangle rules. Pure.

Felix marks, in the mangle table's POSTROUTING, the packets an endpoint
with a DSCP policy sends out of the cluster: from the endpoint's
addresses, to neither an IP pool nor this host (``felix/rules/dscp.go``
and its ``cali-egress-dscp`` chain). Here ``cali-POSTROUTING`` (mangle)
jumps to ``cali-egress-dscp``, which holds per endpoint and policy one
rule: its source addresses, and either "leaving the cluster" (no
destination: not in the all-pools set, not a local address) or the
policy's own destination network, setting the DSCP value. The DSCP
target does not end the chain, so an endpoint's policies are written in
reverse: the first that matches is the last to set the value, and wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.rules.action import Jump, SetDscp
from dataplane.linux.rules.chain import Chain, Serialiser
from dataplane.linux.rules.match import Addresses, InSet, LocalAddress, Match, Side
from dataplane.linux.rules.rule import TableRule
from dataplane.model import DscpPolicy

__all__ = ["DscpSource", "dscp_chains", "dscp_hooks"]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class DscpSource:
    """One endpoint's addresses (both families) and its DSCP policies."""

    name: str  # the endpoint, for the rule's comment
    addresses: tuple[str, ...]
    policies: tuple[DscpPolicy, ...]


def _family(net: str) -> int:
    return 6 if ":" in net else 4


def _rules(source: DscpSource, version: int, pools_set: str) -> list[TableRule]:
    own = tuple(a for a in source.addresses if _family(a) == version)
    if not own:
        return []
    out = []
    for policy in reversed(source.policies):
        match: list[Match] = [Addresses(Side.SRC, own)]
        if policy.destination:
            if _family(policy.destination) != version:
                continue
            match.append(Addresses(Side.DST, (policy.destination,)))
        else:
            match += [InSet(Side.DST, pools_set, negate=True), LocalAddress(Side.DST, negate=True)]
        where = policy.destination or "out of the cluster"
        comment = f"{source.name} DSCP {policy.value} {where}"
        out.append(TableRule(tuple(match), SetDscp(policy.value, version), comment=comment))
    return out


def dscp_chains(
    names: ChainNames,
    out: Serialiser[R],
    version: int,
    sources: Iterable[DscpSource],
    pools_set: str,
) -> list[Chain[R]]:
    """The mangle table's ``cali-POSTROUTING`` and ``cali-egress-dscp`` for IPv``version``."""
    rules = [
        r for s in sorted(sources, key=lambda s: s.name) for r in _rules(s, version, pools_set)
    ]
    chain = names.top("egress-dscp")
    return [
        Chain(names.top("POSTROUTING"), out.rules([TableRule((), Jump(chain))])),
        Chain(chain, out.rules(rules)),
    ]


def dscp_hooks(names: ChainNames, out: Serialiser[R]) -> Mapping[str, tuple[R, ...]]:
    return {"POSTROUTING": out.rules([TableRule((), Jump(names.top("POSTROUTING")))])}
