"""NftNames: our nftables tables' names, from the chain prefix; nft's names checked.

Each family holds two tables of ours: the main one (rules, native IP
sets, the interfaces' maps) and the services table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["NftNames", "nft_name", "nft_tables"]

# nft's identifiers (its scanner's "string"); a chain or set name outside
# this is a bug upstream, refused here rather than sent as nft syntax.
_NAME = re.compile(r"[A-Za-z_.][A-Za-z0-9/_.-]{0,254}")


def nft_name(name: str) -> str:
    """``name`` if nft's scanner reads it as one identifier.

    Raises:
        ValueError: it would not (a space, a quote, a brace...).
    """
    # A lone "." is the concatenation operator to nft's scanner, not a name.
    if not _NAME.fullmatch(name) or name == ".":
        raise ValueError(f"not an nft name: {name!r}")
    return name


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
