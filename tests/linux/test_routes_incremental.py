"""A route sync costs what changed, and ends where a full one would.

The route programmer looks only at the routes handed over as changed, those
waiting for an interface, those out of quarantine and those through an
interface whose link changed; the routes writer hands over only the
addresses of the endpoints that changed. Both are held to the full path on
random histories: two programmers on two fake kernels, one handed every
route at every apply (the full walk), one handed the changes, end each
apply with the same routes in the kernel, the same routes pending and the
same quarantine. And the writer's routes equal the walk over every
endpoint they replace.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import trio
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dataplane.linux.netlink.batch import Request, RouteRequest
from dataplane.linux.netlink.links import LinkMonitor
from dataplane.linux.netlink.overlay_plan import FamilyPlan, OverlayPlan
from dataplane.linux.netlink.route_target import RouteKind, RouteTarget
from dataplane.linux.netlink.routes import RouteProgrammer
from dataplane.linux.writers.routes import RoutesWriter
from dataplane.model import WorkloadEndpoint, WorkloadEndpointKey
from tests.linux.fake_netlink import FakeNetlink

CIDRS = [f"10.65.0.{i}/32" for i in range(6)] + [f"fd00::{i}/128" for i in range(3)]
DEVICES = ["cali1", "cali2", "cali3", "vxlan.calico"]
TARGETS = [RouteTarget.dev(d) for d in DEVICES[:3]] + [
    RouteTarget(RouteKind.BLACKHOLE),
    RouteTarget(RouteKind.GATEWAY, gateway="192.168.0.9"),
    RouteTarget(RouteKind.ONLINK, "vxlan.calico", "10.65.9.0"),
]


class Kernel(FakeNetlink):
    """The fake kernel, which also refuses routes to ``refuse`` and, like the
    kernel, drops a deleted interface's routes with it."""

    def __init__(self) -> None:
        super().__init__({"cali1": 11, "cali2": 12})
        self.refuse: set[str] = set()
        self.next_index = 20

    def _one(self, request: Request, indexes: set[int]) -> OSError | None:
        refused = isinstance(request, RouteRequest) and request.dst in self.refuse
        if refused and request.command == "replace":
            return OSError(errno.EEXIST, os.strerror(errno.EEXIST))
        return super()._one(request, indexes)

    def toggle(self, device: str) -> dict[str, Any]:
        """Add the interface, or delete it; the notification the kernel sends."""
        if device in self.links:
            index, _ = self.links.pop(device)
            self.routes = {d: r for d, r in self.routes.items() if r.oif != index}
            return {"event": "RTM_DELLINK", "ifname": device, "index": index, "flags": 0}
        self.next_index += 1
        self.links[device] = (self.next_index, True)
        up = {"flags": 1, "operstate": "UP"}
        return {"event": "RTM_NEWLINK", "ifname": device, "index": self.next_index} | up


@dataclass
class Node:
    kernel: Kernel
    links: LinkMonitor
    programmer: RouteProgrammer


def _node(clock: list[float]) -> Node:
    kernel = Kernel()
    links = LinkMonitor(kernel)
    programmer = RouteProgrammer(
        kernel, links, protocol=80, clock=lambda: clock[0], writer=kernel.write
    )
    return Node(kernel, links, programmer)


def _state(node: Node) -> tuple[object, ...]:
    p = node.programmer
    return dict(node.kernel.routes), p.pending, p.quarantine.reasons()


_targets = st.sampled_from(TARGETS)
# Few CIDRs and interfaces, many applies: histories that meet the same
# route again after its interface went and came back, or its quarantine ended.
_few = st.sampled_from([*CIDRS[:3], CIDRS[6]])
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("route"), _few, st.none() | _targets),
        st.tuples(st.just("link"), st.sampled_from(["cali1", "cali3", "vxlan.calico"])),
        # Gone and back between two applies, renumbered (a pod made again).
        st.tuples(st.just("relink"), st.sampled_from(["cali1", "vxlan.calico"])),
        st.tuples(st.just("refuse"), _few),
        st.tuples(st.just("time"), st.sampled_from([0.5, 2.0, 400.0])),
        st.tuples(st.just("resync")),
        # The changes' node reads ahead (as while the rules commit): the
        # links, and the routes if it knows none; an apply may follow
        # other ops first.
        st.tuples(st.just("ahead")),
        st.tuples(st.just("apply")),
        st.tuples(st.just("apply")),
    ),
    max_size=50,
)


@settings(max_examples=500, deadline=None)
@given(_ops)
@example([("route", CIDRS[0], TARGETS[0]), ("apply",), ("relink", "cali1")])
@example([("route", CIDRS[0], TARGETS[0]), ("resync",), ("ahead",), ("relink", "cali1")])
@example(
    [
        ("route", CIDRS[0], TARGETS[0]),
        ("apply",),
        ("resync",),
        ("ahead",),  # what it read must hold the route, or it stays
        ("route", CIDRS[0], None),
    ]
)
@example(
    [
        ("route", CIDRS[0], TARGETS[0]),
        ("refuse", CIDRS[0]),
        ("apply",),
        ("refuse", CIDRS[0]),
        ("time", 2.0),
    ]
)
def test_a_sync_of_the_changes_ends_where_a_full_sync_does(ops: list[tuple[Any, ...]]) -> None:
    clock = [0.0]
    full, changes = _node(clock), _node(clock)
    desired: dict[str, RouteTarget] = {}
    changed: dict[str, RouteTarget | None] = {}

    async def apply_both() -> None:
        full.programmer.set_routes(desired)
        changes.programmer.update_routes(changed)
        changed.clear()
        outcomes = []
        for node in (full, changes):
            try:
                await node.programmer.apply()
                outcomes.append("ok")
            except Exception as exc:  # the same failure on both, or none
                outcomes.append(type(exc).__name__)
        assert outcomes[0] == outcomes[1]
        assert _state(full) == _state(changes)

    async def main() -> None:
        changes.programmer.set_routes({})
        for op in [*ops, ("apply",)]:
            if op[0] == "route":
                _, cidr, target = op
                if target is None:
                    desired.pop(cidr, None)
                else:
                    desired[cidr] = target
                changed[cidr] = target
            elif op[0] == "link":
                for node in (full, changes):
                    node.links.apply_events([node.kernel.toggle(op[1])])
            elif op[0] == "relink":
                for node in (full, changes):
                    for _ in range(2 if op[1] in node.kernel.links else 1):
                        node.links.apply_events([node.kernel.toggle(op[1])])
            elif op[0] == "refuse":
                for node in (full, changes):
                    node.kernel.refuse ^= {op[1]}
            elif op[0] == "time":
                clock[0] += op[1]
            elif op[0] == "resync":
                for node in (full, changes):
                    node.programmer.mark_for_resync()
            elif op[0] == "ahead":
                changes.programmer.read_ahead()
            else:
                await apply_both()

    trio.run(main)


def test_an_unchanged_node_looks_at_nothing() -> None:
    """The point of it: with nothing changed, a sync asks nothing of the links."""
    clock = [0.0]
    node = _node(clock)
    node.programmer.set_routes({c: RouteTarget.dev("cali1") for c in CIDRS[:4]})

    asked: set[str] = set()

    class Counting(dict[str, Any]):
        def get(self, key: str, default: Any = None) -> Any:
            asked.add(key)
            return super().get(key, default)

    async def main() -> None:
        await node.programmer.apply()
        assert len(node.kernel.routes) == 4
        node.links.links = Counting(node.links.links)
        await node.programmer.apply()
        assert asked == set()
        node.programmer.update_routes({CIDRS[4]: RouteTarget.dev("cali2")})
        await node.programmer.apply()
        assert asked == {"cali2"} and len(node.kernel.routes) == 5

    trio.run(main)


# --- the writer -------------------------------------------------------------------------


def _walk(endpoints: Mapping[WorkloadEndpointKey, WorkloadEndpoint]) -> dict[str, RouteTarget]:
    """The routes as the writer made them before: a walk over every endpoint,
    in the order they came, the last to claim an address winning."""
    return {
        net: RouteTarget.dev(wep.name)
        for wep in endpoints.values()
        for net in wep.ipv4_nets + wep.ipv6_nets
    }


class Sink:
    def __init__(self) -> None:
        self.routes: dict[str, RouteTarget] = {}
        self.full = 0

    def set_routes(self, desired: Mapping[str, RouteTarget]) -> None:
        self.routes = dict(desired)
        self.full += 1

    def update_routes(self, changes: Mapping[str, RouteTarget | None]) -> None:
        for cidr, target in changes.items():
            if target is None:
                self.routes.pop(cidr, None)
            else:
                self.routes[cidr] = target


def _plan(routes: Sequence[tuple[str, RouteTarget]]) -> OverlayPlan:
    return OverlayPlan({4: FamilyPlan(routes=dict(routes))})


_endpoint_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("set"),
            st.integers(0, 4),  # which endpoint
            st.sampled_from(["cali1", "cali2", "cali3"]),
            st.lists(st.sampled_from(CIDRS[:5]), max_size=2),
            st.lists(st.sampled_from(CIDRS[6:]), max_size=1),
        ),
        st.tuples(st.just("remove"), st.integers(0, 4)),
        st.tuples(
            st.just("plan"),
            st.lists(st.tuples(st.sampled_from(CIDRS[3:7]), _targets), max_size=3),
        ),
        st.tuples(st.just("hand over")),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(_endpoint_ops)
def test_the_writer_hands_over_what_the_walk_over_every_endpoint_gives(
    ops: list[tuple[Any, ...]],
) -> None:
    writer = RoutesWriter()
    endpoints: dict[WorkloadEndpointKey, WorkloadEndpoint] = {}
    sink = Sink()
    plan = _plan([])
    for op in [*ops, ("hand over",)]:
        if op[0] == "set":
            _, n, name, v4, v6 = op
            key = WorkloadEndpointKey("k8s", f"ns/pod{n}", "eth0")
            endpoint = WorkloadEndpoint(key, name, ipv4_nets=tuple(v4), ipv6_nets=tuple(v6))
            endpoints[key] = endpoint
            writer.set(endpoint)
        elif op[0] == "remove":
            key = WorkloadEndpointKey("k8s", f"ns/pod{op[1]}", "eth0")
            endpoints.pop(key, None)
            writer.remove(key)
        elif op[0] == "plan":
            plan = _plan(op[1])
        else:
            writer.hand_over(plan, sink)
            assert dict(writer.routes()) == _walk(endpoints)
            assert sink.routes == plan.routes() | _walk(endpoints)
    assert sink.full == 1  # one sink: everything once, then changes


def test_a_new_sink_is_handed_everything() -> None:
    writer = RoutesWriter()
    key = WorkloadEndpointKey("k8s", "ns/pod", "eth0")
    writer.set(WorkloadEndpoint(key, "cali1", ipv4_nets=("10.65.0.1/32",)))
    plan = _plan([("10.65.9.0/26", RouteTarget(RouteKind.BLACKHOLE))])
    first, second = Sink(), Sink()
    writer.hand_over(plan, first)
    writer.hand_over(plan, second)  # the programmers were made again
    both = {
        "10.65.9.0/26": RouteTarget(RouteKind.BLACKHOLE),
        "10.65.0.1/32": RouteTarget.dev("cali1"),
    }
    assert first.routes == second.routes == both
