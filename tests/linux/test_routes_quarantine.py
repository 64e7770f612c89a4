"""One route the kernel refuses never blocks the others (a netlink fake).

The fake holds a main routing table and refuses routes to CIDRs it is told
to, the way the kernel refuses a route whose interface vanished between
the link read and the write.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import trio

from dataplane.errors import ProgrammingError
from dataplane.linux.netlink.batch import Request, RouteRequest
from dataplane.linux.netlink.links import LinkMonitor
from dataplane.linux.netlink.route_target import RouteTarget
from dataplane.linux.netlink.routes import RouteProgrammer


class FakeNetlink:
    """Links and routes of one namespace; refuses writes to ``refuse``."""

    def __init__(self) -> None:
        self.links = {"cali1": 11, "cali2": 12}
        self.routes: dict[str, int] = {}  # dst/len -> oif, protocol 80 only
        self.refuse: set[str] = set()

    def __call__(self) -> FakeNetlink:
        return self

    def get_links(self) -> list[dict[str, Any]]:
        return [
            {"ifname": n, "index": i, "flags": 1, "operstate": "UP"} for n, i in self.links.items()
        ]

    def get_routes(self, **kwargs: Any) -> list[dict[str, Any]]:
        family = kwargs.get("family")
        out = []
        for cidr, oif in self.routes.items():
            if (":" in cidr) == (family == 10):
                dst, length = cidr.split("/")
                out.append(
                    {"proto": 80, "dst": dst, "dst_len": int(length), "oif": oif}
                    | {"type": 1, "flags": 0}
                )
        return out

    def write(self, requests: Sequence[Request]) -> list[OSError | None]:
        """The batch writer's contract: one result per request, in order."""
        out: list[OSError | None] = []
        for r in requests:
            assert isinstance(r, RouteRequest)
            if r.command == "replace" and r.dst in self.refuse:
                out.append(OSError(19, "No such device"))
                continue
            if r.command == "replace":
                self.routes[r.dst] = r.oif
            elif self.routes.pop(r.dst, None) is None:
                out.append(OSError(3, "No such process"))
                continue
            out.append(None)
        return out

    def close(self) -> None:
        pass


def test_a_refused_route_is_quarantined_and_retried_alone() -> None:
    now = [0.0]
    netlink = FakeNetlink()
    routes = RouteProgrammer(
        netlink,
        LinkMonitor(netlink),
        protocol=80,
        ipv6=True,
        clock=lambda: now[0],
        writer=netlink.write,
    )
    netlink.refuse = {"10.65.0.2/32"}

    async def main() -> None:
        routes.set_routes(
            {"10.65.0.1/32": RouteTarget.dev("cali1"), "10.65.0.2/32": RouteTarget.dev("cali2")}
        )
        await routes.apply()  # does not raise: the other route lands
        assert netlink.routes == {"10.65.0.1/32": 11}
        assert [c for c, _ in routes.take_refusals()] == ["10.65.0.2/32"]
        # Not retried before its backoff ends; retried alone after.
        netlink.refuse.clear()
        await routes.apply()
        assert "10.65.0.2/32" not in netlink.routes
        now[0] = routes.quarantine.next_retry()
        await routes.apply()
        assert netlink.routes == {"10.65.0.1/32": 11, "10.65.0.2/32": 12}
        assert len(routes.quarantine) == 0 and routes.take_refusals() == []

    trio.run(main)


def test_when_every_route_fails_the_apply_fails() -> None:
    netlink = FakeNetlink()
    routes = RouteProgrammer(netlink, LinkMonitor(netlink), protocol=80, writer=netlink.write)
    netlink.refuse = {"10.65.0.1/32", "10.65.0.2/32"}

    async def main() -> None:
        routes.set_routes(
            {"10.65.0.1/32": RouteTarget.dev("cali1"), "10.65.0.2/32": RouteTarget.dev("cali2")}
        )
        try:
            await routes.apply()
        except ProgrammingError as exc:
            assert "No such device" in str(exc)
        else:
            raise AssertionError("expected the apply to fail")
        assert len(routes.quarantine) == 0

    trio.run(main)


class BrokenNetlink(FakeNetlink):
    """Reading the routes raises ``error``: the kernel refusing, or a bug."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error: Exception | None = error

    def get_routes(self, **kwargs: Any) -> list[dict[str, Any]]:
        if self.error is not None:
            raise self.error
        return super().get_routes(**kwargs)


def test_a_kernel_error_fails_the_apply_with_its_cause_and_is_retried() -> None:
    refused = OSError(105, "No buffer space available")
    netlink = BrokenNetlink(refused)
    routes = RouteProgrammer(netlink, LinkMonitor(netlink), protocol=80, writer=netlink.write)

    async def main() -> None:
        routes.set_routes({"10.65.0.1/32": RouteTarget.dev("cali1")})
        with pytest.raises(ProgrammingError, match="routes: OSError") as caught:
            await routes.apply()
        assert caught.value.__cause__ is refused
        netlink.error = None
        await routes.apply()
        assert netlink.routes == {"10.65.0.1/32": 11}

    trio.run(main)


def test_a_bug_is_not_taken_for_the_kernel_refusing() -> None:
    """A TypeError reaches the loop as itself (and stops the driver), never a
    ProgrammingError retried at every apply for ever."""
    netlink = BrokenNetlink(TypeError("'NoneType' object is not subscriptable"))
    routes = RouteProgrammer(netlink, LinkMonitor(netlink), protocol=80, writer=netlink.write)

    async def main() -> None:
        routes.set_routes({"10.65.0.1/32": RouteTarget.dev("cali1")})
        with pytest.raises(TypeError):
            await routes.apply()

    trio.run(main)
