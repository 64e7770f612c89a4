"""The shapes the writers program into, which both backends' programmers have.

The writers (:mod:`dataplane.linux.writers`) fill in chains and IP sets
without knowing which backend holds them: an iptables
:class:`~dataplane.linux.iptables.table.Table` or a share of the one
nftables table per family
(:class:`~dataplane.linux.nftables.view.NftTableView`); ipset's
:class:`~dataplane.linux.ipsets.programmer.IPSetsProgrammer` or native
sets (:class:`~dataplane.linux.nftables.sets.NftSets`). ``R`` is the
backend's rule type; the renderers spell rules in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from dataplane.core.quarantine import Quarantine
from dataplane.linux.rules.chain import Chain
from dataplane.model import IPSet

__all__ = ["TABLES", "RuleTable", "SetProgrammer"]

R_contra = TypeVar("R_contra", contravariant=True)

# The iptables tables, in the order they are written (see LinuxPlatform.apply).
TABLES = ("raw", "mangle", "nat", "filter")


class RuleTable(Protocol[R_contra]):
    """One iptables table (``name``, IPv``version``) as the writers see it."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> int: ...

    def update_chain(self, chain: Chain[R_contra]) -> None: ...

    def remove_chain(self, name: str) -> None: ...

    def set_chains(self, chains: Iterable[Chain[R_contra]]) -> None: ...

    def set_hooks(self, builtin: str, rules: Sequence[R_contra]) -> None: ...


class SetProgrammer(Protocol):
    """The IP sets: desired values in, kernel sets (ipset or nftables) out."""

    quarantine: Quarantine[str]

    def replace(self, ipset: IPSet) -> None: ...

    def update_members(
        self, set_id: str, added: frozenset[str], removed: frozenset[str]
    ) -> None: ...

    def remove(self, set_id: str) -> None: ...

    def kernel_name(self, set_id: str, version: int) -> str: ...

    def wants(self, set_id: str) -> bool: ...

    def counts(self) -> dict[int, int]: ...

    def mark_for_resync(self) -> None: ...

    async def refresh(self) -> bool: ...

    async def apply_updates(self) -> None: ...

    async def apply_deletions(self) -> None: ...

    async def cleanup_all(self) -> None: ...

    def held_back(self) -> dict[str, str]: ...

    def take_refusals(self) -> list[tuple[str, str]]: ...
