"""A frontend's parts, and the second bank that puts new slots in force. Pure.

A backend change rewrites a frontend's slots (maps ``addr``/``port``,
count set ``fe_S``; for outside traffic under Local policy the ``local_``
ones and ``lfe_S``). Deleting a slot takes effect only after the kernel's
RCU grace period, so the new slots are first added, add-only, to a second
bank that the table's rules reach first (count set ``fe1_S``, gate
``fe1``, slot :data:`~dataplane.linux.nftables.service_rules.BANK` + *i*);
the first bank is rewritten and the second emptied afterwards
(``service_table.py``).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping

from dataplane.linux.nftables.elements import key_of, with_key
from dataplane.linux.nftables.service_rules import BANK

__all__ = ["second_bank", "split"]

Elements = tuple[bytes, ...]  # as service_layout.Elements (sorted)

# The two parts of a frontend that a backend change rewrites: its slot
# count set and its slots, for everyone and for outside traffic.
_PARTS = {"fe": "all", "lfe": "local"}  # of the count sets fe_S, lfe_S (not the gates)
_MAP_PARTS = {"addr": "all", "port": "all", "local_addr": "local", "local_port": "local"}
_SLOT_AT = struct.Struct("=I")


def split(elements: Mapping[str, Elements]) -> dict[str, dict[str, Elements]]:
    """A frontend's elements by part: "all" and "local" (what a backend
    change rewrites), "frame" (everything else: where the frontend's
    traffic goes at all, masquerade, refusals)."""
    out: dict[str, dict[str, Elements]] = {"frame": {}, "all": {}, "local": {}}
    for name, members in elements.items():
        base = name.removeprefix("np_")
        count = re.fullmatch(r"(l?fe)_\d+", base)
        part = _PARTS[count.group(1)] if count else _MAP_PARTS.get(base, "frame")
        out[part][name] = members
    return out


def second_bank(part: Mapping[str, Elements]) -> dict[str, frozenset[bytes]]:
    """The same part in the second bank: count set ``fe_S`` becomes
    ``fe1_S`` (and the frontend joins gate ``fe1``), slot *i* becomes
    ``BANK + i``. Adding it puts new slots in force without deleting
    anything; the kernel commits a deletion only after a grace period."""
    out: dict[str, set[bytes]] = {}
    for name, members in part.items():
        count = re.fullmatch(r"(np_)?(l?fe)_(\d+)", name)
        if count:
            prefix, kind, n = count.groups()
            prefix = prefix or ""
            out.setdefault(f"{prefix}{kind}1_{n}", set()).update(members)
            out.setdefault(f"{prefix}{kind}1", set()).update(members)
            continue
        moved = out.setdefault(name, set())
        for element in members:
            key = key_of(element)
            (slot,) = _SLOT_AT.unpack_from(key, len(key) - 4)  # the key's last field
            moved.add(with_key(element, key[:-4] + _SLOT_AT.pack(slot + BANK)))
    return {name: frozenset(members) for name, members in out.items()}
