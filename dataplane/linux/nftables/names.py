"""NftNames: our nftables tables' names, from the chain prefix.

Each family holds two tables of ours: the main one (rules, native IP
sets, the interfaces' maps) and the services table.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataplane.linux.nftables.serialise import nft_name

__all__ = ["NftNames", "nft_tables"]


@dataclass(frozen=True, slots=True)
class NftNames:
    """Our nftables tables (in each family): rules and IP sets, and services."""

    main: str
    services: str


def nft_tables(prefix: str) -> NftNames:
    """Our tables' names for chain prefix ``prefix`` ("cali-": cali, cali-svc).

    Raises:
        ValueError: a prefix nft could not read as a table name.
    """
    stem = prefix.rstrip("-") or "cali"
    return NftNames(nft_name(stem), nft_name(f"{stem}-svc"))
