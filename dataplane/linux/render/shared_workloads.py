"""Workload chains as nftables holds them: shared by policy, reached by verdict maps. Pure.

On iptables every workload has two chains of its own (``cali-tw-<if>``,
``cali-fw-<if>``) and dispatch is a tree of rules on interface names.
Through ``nft -f`` that costs an endpoint ~50 ms however small it is: every
run fetches the whole ruleset and a commit of rules that jump validates
the table (``docs/nftables.md``). So on nftables the chains hold nothing
of one endpoint: they are named by a digest of what they hold, and every
endpoint with the same effective policy (and admin state) reaches the same
pair. What is the endpoint's own is data in the table, written by the
element writer: its interface in the dispatch maps (``iifname vmap
@wl-from``, ``oifname vmap @wl-to``; an element per interface, ``goto`` its
shared chain) and its allowed sources in an ``ifname . address`` interval
set, which the shared egress chain looks the packet's interface and
source up in -- the anti-spoofing rule each endpoint's chain had. An
endpoint whose policy was seen before is then element writes only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TypeVar

from dataplane.linux.render.dispatch import UNKNOWN_WORKLOAD
from dataplane.linux.render.filter import ANTI_SPOOF, ENDPOINT_DOWN, FilterRenderer
from dataplane.linux.render.overlay import encap_drops
from dataplane.linux.render.qos_rules import connection_limit
from dataplane.linux.rules.action import Dispatch, Drop
from dataplane.linux.rules.chain import Chain
from dataplane.linux.rules.match import InSet, SetKind, Side
from dataplane.linux.rules.rule import TableRule
from dataplane.model import EffectivePolicy, WorkloadEndpoint

__all__ = ["FROM_MAP", "SOURCES", "TO_MAP", "map_dispatch", "shared_workload_chains"]

R = TypeVar("R")

# The table's per-interface maps and set (names in the nft table, where
# sets live beside the four iptables tables' chains).
FROM_MAP = "wl-from"
TO_MAP = "wl-to"
SOURCES = "wl-sources"
_DIGEST = 16  # hex characters of the chain's digest: 64 bits


def _digest(rules: Sequence[R]) -> str:
    # The serialised rules' repr is the same in every run (text, comment,
    # origin): a restart finds the chains it wrote under the same names.
    return hashlib.sha256(repr(tuple(rules)).encode()).hexdigest()[:_DIGEST]


def shared_workload_chains(
    render: FilterRenderer[R], endpoint: WorkloadEndpoint, policy: EffectivePolicy
) -> tuple[Chain[R], Chain[R]]:
    """``endpoint``'s ingress and egress chains, named by what they hold."""
    if not endpoint.admin_up:
        ingress: Sequence[TableRule] = ENDPOINT_DOWN
        egress: Sequence[TableRule] = ENDPOINT_DOWN
    else:
        spoofed = InSet(Side.SRC, SOURCES, SetKind.INTERFACE_ADDRESSES, negate=True)
        ingress = [*connection_limit(endpoint, True), *render.tiered_rules(policy.ingress, True)]
        egress = [
            *connection_limit(endpoint, False),
            TableRule((spoofed,), Drop(), comment=ANTI_SPOOF),
            *encap_drops(render.config),
            *render.tiered_rules(policy.egress, False),
        ]
    names = render.names
    to_rules, from_rules = render.out.rules(ingress), render.out.rules(egress)
    return (
        Chain(names.shared_workload(_digest(to_rules), True), to_rules),
        Chain(names.shared_workload(_digest(from_rules), False), from_rules),
    )


def map_dispatch(render: FilterRenderer[R]) -> list[Chain[R]]:
    """The dispatch chains: each interface's element in the map, else drop."""
    n = render.names
    return [
        Chain(
            n.top("from-wl-dispatch"),
            render.out.rules([TableRule((), Dispatch(FROM_MAP, True)), UNKNOWN_WORKLOAD]),
        ),
        Chain(
            n.top("to-wl-dispatch"),
            render.out.rules([TableRule((), Dispatch(TO_MAP, False)), UNKNOWN_WORKLOAD]),
        ),
    ]
