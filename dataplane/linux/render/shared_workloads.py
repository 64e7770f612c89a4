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
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

from dataplane.linux.render.dispatch import UNKNOWN_WORKLOAD
from dataplane.linux.render.filter import ANTI_SPOOF, ENDPOINT_DOWN, FilterRenderer
from dataplane.linux.render.overlay import encap_drops
from dataplane.linux.render.qos_rules import connection_limit
from dataplane.linux.rules.action import Dispatch, Drop
from dataplane.linux.rules.chain import Chain, Serialiser
from dataplane.linux.rules.match import InSet, SetKind, Side
from dataplane.linux.rules.rule import TableRule
from dataplane.model import EffectivePolicy, WorkloadEndpoint

__all__ = [
    "FROM_MAP",
    "SOURCES",
    "TO_MAP",
    "SerialisedRules",
    "map_dispatch",
    "shared_workload_chains",
    "shared_workload_rules",
]

R = TypeVar("R")

# The table's per-interface maps and set (names in the nft table, where
# sets live beside the four iptables tables' chains).
FROM_MAP = "wl-from"
TO_MAP = "wl-to"
SOURCES = "wl-sources"
_DIGEST = 16  # hex characters of the chain's digest: 64 bits
# First in every egress chain: a source the interface may not send from.
_SPOOFED = TableRule(
    (InSet(Side.SRC, SOURCES, SetKind.INTERFACE_ADDRESSES, negate=True),),
    Drop(),
    comment=ANTI_SPOOF,
)


def _digest(reprs: Sequence[str]) -> str:
    # The digest of the serialised rules' tuple's repr, made from each
    # rule's: the same in every run (text, comment, origin), so a restart
    # finds the chains it wrote under the same names.
    text = "(" + ", ".join(reprs) + ("," if len(reprs) == 1 else "") + ")"
    return hashlib.sha256(text.encode()).hexdigest()[:_DIGEST]


class SerialisedRules(Generic[R]):
    """Workload chains' rules, each serialised once by ``out``.

    Every shared chain is made of the same few rules: a tier's mark reset,
    a jump to each of its policies and the return after it, the end of the
    tier, the profiles. On a node where each endpoint has a combination of
    its own, serialising them again for every chain was half of a first
    apply's rendering (4.3 us a rule, against 0.9 us to find it here).
    Bounded: emptied when it holds :attr:`LIMIT` rules.
    """

    LIMIT = 8192

    def __init__(self, out: Serialiser[R]) -> None:
        self.out = out
        self._seen: dict[TableRule, tuple[tuple[R, ...], tuple[str, ...]]] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def rules(self, rules: Iterable[TableRule]) -> tuple[tuple[R, ...], str]:
        """``rules`` serialised, and the digest that names a chain of them."""
        seen = self._seen
        out: list[R] = []
        reprs: list[str] = []
        for rule in rules:
            known = seen.get(rule)
            if known is None:
                if len(seen) >= self.LIMIT:
                    seen.clear()
                done = self.out.rules((rule,))
                known = seen[rule] = (done, tuple(map(repr, done)))
            out.extend(known[0])
            reprs.extend(known[1])
        return tuple(out), _digest(reprs)


def shared_workload_rules(
    render: FilterRenderer[R], endpoint: WorkloadEndpoint, policy: EffectivePolicy
) -> tuple[Sequence[TableRule], Sequence[TableRule]]:
    """What ``endpoint``'s ingress and egress chains hold, as model rules."""
    if not endpoint.admin_up:
        return ENDPOINT_DOWN, ENDPOINT_DOWN
    ingress = [*connection_limit(endpoint, True), *render.tiered_rules(policy.ingress, True)]
    egress = [
        *connection_limit(endpoint, False),
        _SPOOFED,
        *encap_drops(render.config),
        *render.tiered_rules(policy.egress, False),
    ]
    return ingress, egress


def shared_workload_chains(
    render: FilterRenderer[R],
    endpoint: WorkloadEndpoint,
    policy: EffectivePolicy,
    serialised: SerialisedRules[R] | None = None,
) -> tuple[Chain[R], Chain[R]]:
    """``endpoint``'s ingress and egress chains, named by what they hold.

    ``serialised``: rules serialised before, by ``render``'s serialiser (a
    writer keeps one across its endpoints and applies).
    """
    if serialised is None or serialised.out is not render.out:
        serialised = SerialisedRules(render.out)
    ingress, egress = shared_workload_rules(render, endpoint, policy)
    names = render.names
    to_rules, to_digest = serialised.rules(ingress)
    from_rules, from_digest = serialised.rules(egress)
    return (
        Chain(names.shared_workload(to_digest, True), to_rules),
        Chain(names.shared_workload(from_digest, False), from_rules),
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
