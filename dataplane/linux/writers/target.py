"""Target: what the Linux writers write into at one apply."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dataplane.config import Config
from dataplane.linux.chain_names import ChainNames
from dataplane.linux.filter_render import FilterRenderer
from dataplane.linux.ipsets import IPSetsProgrammer
from dataplane.linux.table import Table

__all__ = ["Target"]


@dataclass(frozen=True, slots=True)
class Target:
    """The programmers and the per-version renderers for the current config."""

    versions: tuple[int, ...]
    config: Config
    names: ChainNames
    tables: Mapping[tuple[str, int], Table]
    ipsets: IPSetsProgrammer
    filters: Mapping[int, FilterRenderer]

    def table(self, name: str, version: int) -> Table:
        return self.tables[(name, version)]
