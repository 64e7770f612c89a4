"""DispatchTrees: prefix trees over interface names, each leaf going to an endpoint's chain.

iptables has no verdict maps: a packet finds its endpoint's chain through
a tree of ``-i cali1+`` / ``-o cali1+`` matches, a few rules deep, so no
packet walks one rule per endpoint (nftables dispatches by verdict maps,
:mod:`~dataplane.linux.render.shared_workloads`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.rules.action import Drop, Goto, Return
from dataplane.linux.rules.chain import Chain, Serialiser
from dataplane.linux.rules.match import Interface
from dataplane.linux.rules.rule import TableRule

__all__ = ["UNKNOWN_WORKLOAD", "DispatchTrees"]

UNKNOWN_WORKLOAD = TableRule((), Drop(), comment="unknown workload interface")
_DISPATCH_LEAF = 16  # interfaces matched directly before the tree branches

_SubtreeKey = tuple[str, tuple[str, ...], TableRule | None]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class DispatchTrees(Generic[R]):
    """The dispatch trees of one table, in the syntax ``out`` spells."""

    names: ChainNames
    out: Serialiser[R]
    # Subtrees rendered before, by root chain: an interface added or
    # removed changes only the chains on its path, and rendering every
    # other one again cost ~60 ms per endpoint at 1,000 endpoints. The same
    # inputs give the same chains, so this changes no output.
    _memo: dict[str, dict[_SubtreeKey, list[Chain[R]]]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def tree(  # noqa: PLR0917 - each argument is one aspect of the tree
        self,
        root: str,
        child_kind: str,
        inbound: bool,
        ifaces: Iterable[str],
        target: Callable[[str], str],
        default: TableRule,
    ) -> list[Chain[R]]:
        """A prefix tree over interface names; each leaf gotos ``target(iface)``.

        Children come before their parent. Subtrees whose inputs are
        unchanged since the last call for ``root`` are taken as rendered.
        """
        # The root names the tree: its direction and what its leaves reach.
        memo = self._memo.setdefault(root, {})

        def leaf(iface: str) -> TableRule:
            return TableRule((Interface(iface, inbound),), Goto(target(iface)))

        def build(name: str, members: list[str], final: TableRule | None) -> list[Chain[R]]:
            key = (name, tuple(members), final)
            made = memo.get(key)
            if made is None:
                made = []
                rules: list[TableRule] = []
                if len(members) <= _DISPATCH_LEAF:
                    rules = [leaf(i) for i in members]
                else:
                    common = os.path.commonprefix(members)  # noqa: RUF071 - string prefix wanted
                    groups: dict[str, list[str]] = {}
                    for iface in members:
                        if iface == common:
                            rules.append(leaf(iface))
                        else:
                            groups.setdefault(common + iface[len(common)], []).append(iface)
                    for branch in sorted(groups):
                        group = groups[branch]
                        if len(group) == 1:
                            rules.append(leaf(group[0]))
                            continue
                        child = self.names.dispatch_child(child_kind, branch)
                        rules.append(TableRule((Interface(f"{branch}+", inbound),), Goto(child)))
                        made.extend(build(child, group, default))
                if final is not None:
                    rules.append(final)
                made.append(Chain(name, self.out.rules(rules)))
                memo[key] = made
            return made

        members = set(ifaces)
        if "" in members:
            # "" is a host endpoint on every interface (Felix's "*"): not a
            # leaf (there is no "-i " to match) but what every interface
            # without an endpoint of its own falls through to.
            members.discard("")
            default = TableRule((), Goto(target("")), comment="all-interfaces endpoint")
        chains = list(build(root, sorted(members), default))
        if len(memo) > 2 * len(chains) + 64:
            # Subtrees of interface sets long gone: keep those whose chain
            # (the last of each entry) is in this tree.
            live = {id(c) for c in chains}
            self._memo[root] = {k: v for k, v in memo.items() if id(v[-1]) in live}
        return chains

    def workloads(self, ifaces: Iterable[str]) -> list[Chain[R]]:
        """Dispatch to workload endpoint chains, from and to the workload."""
        n = self.names
        names = sorted(ifaces)
        return self.tree(
            n.top("from-wl-dispatch"), "fwd", True, names, n.from_workload, UNKNOWN_WORKLOAD
        ) + self.tree(n.top("to-wl-dispatch"), "twd", False, names, n.to_workload, UNKNOWN_WORKLOAD)

    def hosts(self, ifaces: Iterable[str]) -> list[Chain[R]]:
        """Dispatch to host endpoint chains, local and forwarded traffic."""
        n = self.names
        # Interfaces without a host endpoint are not policed.
        other = TableRule((), Return())
        names = sorted(ifaces)
        return (
            self.tree(n.top("from-host-endpoint"), "fhd", True, names, n.from_host_endpoint, other)
            + self.tree(n.top("to-host-endpoint"), "thd", False, names, n.to_host_endpoint, other)
            + self.tree(
                n.top("from-hep-forward"),
                "fhfd",
                True,
                names,
                lambda i: n.dispatch_child("fhfw", i),
                other,
            )
            + self.tree(
                n.top("to-hep-forward"),
                "thfd",
                False,
                names,
                lambda i: n.dispatch_child("thfw", i),
                other,
            )
        )
