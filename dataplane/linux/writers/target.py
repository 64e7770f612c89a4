"""Target: what the Linux writers write into at one apply."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dataplane.config import Config
from dataplane.linux.ipsets.programmer import IPSetsProgrammer
from dataplane.linux.iptables.chains import IptRule
from dataplane.linux.iptables.table import Table
from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.render.filter import FilterRenderer

__all__ = ["Target"]


@dataclass(frozen=True, slots=True)
class Target:
    """The programmers and the per-version renderers for the current config."""

    versions: tuple[int, ...]
    config: Config
    names: ChainNames
    tables: Mapping[tuple[str, int], Table]
    ipsets: IPSetsProgrammer
    filters: Mapping[int, FilterRenderer[IptRule]]

    def table(self, name: str, version: int) -> Table:
        return self.tables[(name, version)]
