"""A rule's identity in the kernel: a hash of its place and text (Felix's scheme)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable

__all__ = ["HASH_LEN", "HASH_TAG", "chain_hashes"]

HASH_LEN = 16
# What a rule's comment starts with when it carries its hash (both backends).
HASH_TAG = "cali:"


def chain_hashes(chain: str, texts: Iterable[str]) -> list[str]:
    """Position-dependent hashes of a chain's rules, given each rule's text.

    Each covers the chain's name, the rule's text and the previous rule's
    hash, so two chains hold the same rules in the same order exactly when
    their lists of hashes are equal -- whatever text the kernel's tools
    print back. Both backends write these into their rules' comments.
    """
    out = []
    previous = chain
    for text in texts:
        digest = hashlib.sha224(f"{previous}\0{text}".encode()).digest()
        previous = base64.urlsafe_b64encode(digest).decode()[:HASH_LEN]
        out.append(previous)
    return out
