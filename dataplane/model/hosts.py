"""Host metadata and the cluster's encapsulation: what Felix tells every node about the others.

Felix sends one ``HostMetadata*Update`` per node with the node's addresses
(what ``this-host``/``all-hosts-net`` style matches and CrossSubnet routing
need) and one ``Encapsulation`` derived from the IP pools (which overlays
are in use). These are the validated forms handed to the platforms.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Encapsulation", "Host"]


@dataclass(frozen=True, slots=True, order=True)
class Host:
    """A node's metadata: its addresses (canonical, no prefix; "" if none), AS and labels."""

    name: str
    ipv4: str = ""
    ipv6: str = ""
    ipv4_prefix: int = 0  # the subnet length Felix sent with the address (0: none)
    ipv6_prefix: int = 0
    asnumber: str = ""
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Encapsulation:
    """Which overlays the IP pools use (Felix restarts the driver when it changes)."""

    ipip: bool = False
    vxlan: bool = False
    vxlan_v6: bool = False
    no_encap: bool = False
