"""FakeNetlink: the links and main routing table of a node, for the Linux platform without root.

It is the slice of pyroute2's ``IPRoute`` the platform reads through
(``get_links``, ``get_routes``, ``link("get")``, ``bind``/``get`` for link
notifications) and the batch writer's contract (:meth:`write`: one result
per request, in order, an ``OSError`` for each refusal), over tables in
memory, with the kernel's answers where the programmers depend on them:

* a route replace needs its interface (``ENODEV`` otherwise) and a delete
  its route (``ESRCH``); routes read back carry the protocol they were
  written with, so the routes programmer adopts its own and no others;
* ``link("get")`` of a device that does not exist raises ``ENODEV`` as a
  ``NetlinkError``, as the platform's handle does; this fake makes no VXLAN devices
  (the overlay is the kernel tests' business);
* it sends no link notifications: ``get`` says so with an ``OSError``, and
  the platform falls back to its refresh timers, as it does on a kernel
  that stops sending them.

``links`` may be changed between applies (a CNI creating or deleting a
pod's interface); ``writes`` counts the requests written.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from typing import Any

from dataplane.linux.kernel.errors import NetlinkError
from dataplane.linux.netlink.batch import NeighRequest, Request, RouteRequest

__all__ = ["FakeNetlink"]

_IFF_UP = 1


class FakeNetlink:
    """Links by name (-> index, up) and the main table's routes by destination."""

    def __init__(self, links: dict[str, int] | None = None) -> None:
        self.links: dict[str, tuple[int, bool]] = {
            name: (index, True) for name, index in (links or {}).items()
        }
        self.routes: dict[str, RouteRequest] = {}  # dst CIDR -> the request that made it
        self.writes = 0

    def __call__(self) -> FakeNetlink:
        """The handle factory the platform takes: every handle sees the same node."""
        return self

    # --- reads (pyroute2's shapes) ----------------------------------------------------

    def get_links(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return [
            {"ifname": name, "index": index, "flags": _IFF_UP if up else 0}
            | {"operstate": "UP" if up else "DOWN"}
            for name, (index, up) in sorted(self.links.items())
        ]

    def get_routes(self, **kwargs: Any) -> list[dict[str, Any]]:
        family = kwargs.get("family")
        out = []
        for dst, route in sorted(self.routes.items()):
            if (":" in dst) != (family == 10):
                continue
            address, length = dst.split("/")
            out.append(
                {"dst": address, "dst_len": int(length), "proto": route.protocol}
                | {"type": route.rtype, "oif": route.oif, "gateway": route.gateway or None}
                | {"flags": 4 if route.onlink else 0}
            )
        return out

    def link(self, command: str, **kwargs: Any) -> list[dict[str, Any]]:
        name = kwargs.get("ifname")
        if command == "get" and name in self.links:
            return [link for link in self.get_links() if link["ifname"] == name]
        raise NetlinkError(errno.ENODEV, os.strerror(errno.ENODEV))

    def bind(self, groups: int = 0) -> None:
        pass

    def get(self) -> Any:
        raise OSError(errno.EOPNOTSUPP, "the fake sends no link notifications")

    def close(self) -> None:
        pass

    # --- writes (the batch writer's contract) -----------------------------------------

    def write(self, requests: Sequence[Request]) -> list[OSError | None]:
        out: list[OSError | None] = []
        indexes = {index for index, _ in self.links.values()}
        for request in requests:
            self.writes += 1
            out.append(self._one(request, indexes))
        return out

    def _one(self, request: Request, indexes: set[int]) -> OSError | None:
        if isinstance(request, NeighRequest):
            # Neighbour and FDB entries live on VXLAN devices, which this fake
            # does not make.
            return OSError(errno.ENODEV, os.strerror(errno.ENODEV))
        if request.command == "del":
            if self.routes.pop(request.dst, None) is None:
                return OSError(errno.ESRCH, os.strerror(errno.ESRCH))
            return None
        if request.oif and request.oif not in indexes:
            return OSError(errno.ENODEV, os.strerror(errno.ENODEV))
        self.routes[request.dst] = request
        return None
