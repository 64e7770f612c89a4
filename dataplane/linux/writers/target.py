"""Target: what the Linux writers write into at one apply."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from dataplane.config import Config
from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.render.filter import FilterRenderer
from dataplane.linux.writers.shapes import RuleTable, SetProgrammer

if TYPE_CHECKING:
    from dataplane.linux.nftables.service_table import ServiceTable

__all__ = ["R", "Target"]

R = TypeVar("R")  # the backend's rule type


@dataclass(frozen=True, slots=True)
class Target(Generic[R]):
    """The programmers and the renderers for the current config.

    ``renderers`` spell each (table, version)'s rules in the backend's
    syntax: on iptables one renderer per version serves all four tables;
    on nftables each table has its own, whose jumps name its share of the
    family's one table. ``services`` is the services table per version
    where services have one (nftables), else empty: kube-proxy's chains
    go into the nat table.
    """

    versions: tuple[int, ...]
    config: Config
    names: ChainNames
    tables: Mapping[tuple[str, int], RuleTable[R]]
    ipsets: SetProgrammer
    renderers: Mapping[tuple[str, int], FilterRenderer[R]]
    services: Mapping[int, ServiceTable]

    def table(self, name: str, version: int) -> RuleTable[R]:
        return self.tables[(name, version)]

    def renderer(self, table: str, version: int) -> FilterRenderer[R]:
        return self.renderers[(table, version)]
