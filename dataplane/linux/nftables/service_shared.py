"""The services table's shared sets: which backends' addresses every service shares.

A backend's address is one element of ``remote`` (a pod elsewhere) or of
``hairpin`` (a pod of this node, its address twice: source and
destination), however many services it backs: each service contributes
the elements, and the table counts how many hold each one.
"""

from __future__ import annotations

from socket import AF_INET, AF_INET6, inet_pton

from dataplane.linux.nftables.elements import encoder
from dataplane.model.services import Backend

__all__ = ["shared"]

# Per family: a remote backend's element, a local one's.
_ELEMENTS = {4: (encoder(4, 0), encoder(8, 0)), 6: (encoder(16, 0), encoder(32, 0))}


def shared(version: int, backends: tuple[Backend, ...]) -> dict[str, tuple[bytes, ...]]:
    """The IPv``version`` backends' elements of the shared sets, sorted."""
    six = version == 6
    af = AF_INET6 if six else AF_INET
    remote_element, hairpin_element = _ELEMENTS[version]
    hairpin: set[bytes] = set()
    remote: set[bytes] = set()
    # Every backend of every service passes here at a start (100,000 at
    # 10,000 services): one parse and one join each, no call between.
    for b in backends:
        address = b.address
        if (":" in address) is six:
            packed = inet_pton(af, address)
            # Only a pod of this node can reach itself through us; others
            # are hairpinned by their own node.
            if b.local:
                hairpin.add(hairpin_element(packed + packed, b""))
            else:
                remote.add(remote_element(packed, b""))
    out: dict[str, tuple[bytes, ...]] = {}
    if hairpin:
        out["hairpin"] = tuple(sorted(hairpin))
    if remote:
        out["remote"] = tuple(sorted(remote))
    return out
