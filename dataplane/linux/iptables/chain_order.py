"""The order new chains can be created in: every chain after the chains it jumps to.

A chain that does not exist yet is unreachable until some rule jumps to it,
so chains created leaves first can be written in several restores without a
packet ever meeting a half-built one (``Table`` preloads large loads so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from dataplane.linux.iptables.chains import IptRule

__all__ = ["leaves_first"]


def leaves_first(new: Set[str], rules: Mapping[str, Sequence[IptRule]]) -> list[str]:
    """``new`` in post-order: each chain after every chain of ``new`` it jumps or goes to.

    iptables refuses loops, so the chains form a DAG; sorted roots keep the
    order deterministic.
    """
    order: list[str] = []
    done: set[str] = set()

    def visit(name: str) -> None:
        done.add(name)
        for rule in rules[name]:
            parts = rule.action.split()
            if len(parts) > 1 and parts[0] in ("-j", "-g"):
                target = parts[1]
                if target in new and target not in done:
                    visit(target)
        order.append(name)

    for name in sorted(new):
        if name not in done:
            visit(name)
    return order
