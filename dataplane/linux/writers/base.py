"""FilterBase: the filter table's static chains and built-in chain hooks.

They depend only on configuration, so they are written at the first apply
and after each configuration change.
"""

from __future__ import annotations

from dataplane.linux.writers.groups import ChainGroups
from dataplane.linux.writers.target import R, Target

__all__ = ["FilterBase"]


class FilterBase:
    def __init__(self) -> None:
        self._groups = ChainGroups()

    def write(self, target: Target[R], everything: bool) -> None:
        if not everything:
            return
        for version in target.versions:
            render = target.renderer("filter", version)
            table = target.table("filter", version)
            self._groups.set(table, "static", render.static_chains())
            for builtin, rules in render.hooks().items():
                table.set_hooks(builtin, rules)
