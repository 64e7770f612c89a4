"""HNS load balancers as comparable values: what HNS holds vs what is wanted.

HNS may list a load balancer's fields in another order or spelling than
they were sent (ids in upper case, lists reordered, zero fields omitted),
so both sides are reduced to a :data:`Shape` before they are compared: equal
shapes mean no call. :func:`key_of` reads back the frontend a listed load
balancer serves, which is how a restart matches what it finds to what it
wants.
"""

from __future__ import annotations

import ipaddress

from dataplane.windows.hns.hcn import LB_IPV6, LB_PROTOCOLS, Json
from dataplane.windows.services.lb_render import LbKey

__all__ = ["Shape", "key_of", "shape_of"]

_NAMES = {number: name for name, number in LB_PROTOCOLS.items()}

# (VIPs, mappings, endpoint ids, source VIP, flags), each normalised.
Shape = tuple[
    tuple[str, ...],
    tuple[tuple[int, int, int, int, int], ...],
    tuple[str, ...],
    str,
    int,
]


def _address(text: object) -> str:
    try:
        return str(ipaddress.ip_address(str(text)))
    except ValueError:
        return str(text)


def _int(value: object) -> int:
    if value is None:
        return 0  # omitted: hcsshim leaves zero fields out
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return -1  # not a value we would send: it differs from ours


def shape_of(lb: Json) -> Shape:
    mappings = tuple(
        sorted(
            (
                _int(m.get("Protocol")),
                _int(m.get("InternalPort")),
                _int(m.get("ExternalPort")),
                _int(m.get("DistributionType")),
                _int(m.get("Flags")),
            )
            for m in lb.get("PortMappings") or ()
            if isinstance(m, dict)
        )
    )
    return (
        tuple(sorted(_address(v) for v in lb.get("FrontendVIPs") or ())),
        mappings,
        tuple(sorted(str(e).upper() for e in lb.get("HostComputeEndpoints") or ())),
        _address(lb["SourceVIP"]) if lb.get("SourceVIP") else "",
        _int(lb.get("Flags")),
    )


def key_of(shape: Shape) -> LbKey | None:
    """The frontend of a load balancer shaped as ours (one VIP or none, one mapping)."""
    vips, mappings, _, _, flags = shape
    if len(vips) > 1 or len(mappings) != 1 or mappings[0][0] not in _NAMES:
        return None
    vip = vips[0] if vips else ""
    family = 6 if (flags & LB_IPV6 or ":" in vip) else 4
    return LbKey(_NAMES[mappings[0][0]], vip, mappings[0][2], family)
