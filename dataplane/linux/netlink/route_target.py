"""RouteTarget: where a route we own sends its destination.

One value per destination CIDR, whatever wants it: a local workload (via
its interface), a remote node's block (via that node's VXLAN tunnel
address, on the VXLAN device, onlink; or via the node's own address when it
shares our subnet), or one of our own blocks (blackholed, so an address of
ours with no pod yet is dropped here rather than sent to the default
route). The route programmer compares these with what the kernel holds.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["RouteKind", "RouteTarget"]


class RouteKind(enum.Enum):
    DEVICE = "device"  # straight out of ``device`` (scope link for IPv4)
    ONLINK = "onlink"  # via ``gateway`` on ``device``, which need not share a subnet
    GATEWAY = "gateway"  # via ``gateway``; the kernel picks the interface
    BLACKHOLE = "blackhole"  # dropped here


@dataclass(frozen=True, slots=True, order=True)
class RouteTarget:
    kind: RouteKind
    device: str = ""
    gateway: str = ""

    @classmethod
    def dev(cls, device: str) -> RouteTarget:
        return cls(RouteKind.DEVICE, device)

    def text(self) -> str:
        """As ``ip route`` would show it (dumps, logs)."""
        if self.kind is RouteKind.BLACKHOLE:
            return "blackhole"
        if self.kind is RouteKind.GATEWAY:
            return f"via {self.gateway}"
        if self.kind is RouteKind.ONLINK:
            return f"via {self.gateway} dev {self.device} onlink"
        return f"dev {self.device}"
