"""The pure VXLAN route renderer: which routes qualify, and the exact HNS policy JSON."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataplane.model.routes import PoolType, Route, RouteType, Vtep, VtepAddress
from dataplane.windows.hns.hcn import Json
from dataplane.windows.overlay.vxlan_render import (
    SubnetRoute,
    parse_route,
    render_routes,
    route_changes,
    vni_problem,
)

VTEPS = {
    "node-1": Vtep("node-1", v4=VtepAddress("66:1a:2b:3c:4d:01", "10.65.1.0", "192.0.2.1")),
    "node-2": Vtep("node-2", v4=VtepAddress("66:1a:2b:3c:4d:02", "10.65.2.0", "192.0.2.2")),
    "node-6": Vtep("node-6", v6=VtepAddress("66:1a:2b:3c:4d:06", "fd00::6", "2001:db8::6")),
}
REMOTE = RouteType.REMOTE_WORKLOAD


def block(dst: str, node: str, types: RouteType = REMOTE, pool: PoolType = PoolType.VXLAN) -> Route:
    return Route(dst, types=types, pool_type=pool, dst_node_name=node)


def test_a_remote_vxlan_block_is_one_remote_subnet_route_exactly_as_hcsshim_marshals_it() -> None:
    (route,) = render_routes(VTEPS, [block("10.65.2.64/26", "node-2")], 4097, "node-1")
    assert route.policy() == {
        "Type": "RemoteSubnetRoute",
        "Settings": {
            "DestinationPrefix": "10.65.2.64/26",
            "IsolationId": 4097,
            "ProviderAddress": "192.0.2.2",
            "DistributedRouterMacAddress": "66-1a-2b-3c-4d-02",
        },
    }


@pytest.mark.parametrize(
    "route",
    [
        block("10.65.1.0/26", "node-1"),  # this node's own block
        block("10.65.1.0/26", "node-1", RouteType.LOCAL_WORKLOAD),
        block("10.65.2.0/26", "node-2", pool=PoolType.NO_ENCAP),
        block("10.65.2.0/26", "node-2", pool=PoolType.IPIP),
        block("10.65.0.0/16", "", RouteType.CIDR_INFO),
        block("192.0.2.2/32", "node-2", RouteType.REMOTE_HOST),
        block("10.65.2.0/26", "node-5"),  # no VTEP for that node
        block("10.65.6.0/26", "node-6"),  # its VTEP has no IPv4 part
        block("fd00:10:65:2::/122", "node-2"),  # no IPv6 VXLAN on Windows
        block("10.65.2.0/26", ""),
    ],
    ids=str,
)
def test_what_does_not_qualify(route: Route) -> None:
    assert render_routes(VTEPS, [route], 4096, "node-1") == frozenset()


def test_other_type_bits_beside_remote_workload_still_qualify() -> None:
    types = REMOTE | RouteType.REMOTE_TUNNEL
    assert len(render_routes(VTEPS, [block("10.65.2.0/26", "node-2", types)], 4096, "")) == 1


def test_vni_must_be_one_hns_takes() -> None:
    assert vni_problem(4096) is None
    assert vni_problem(65535) is None
    assert vni_problem(4095) == "VXLANVNI 4095 is not usable on Windows (must be 4096..65535)"
    assert vni_problem(65536) is not None


WANTED = SubnetRoute("10.65.2.0/26", 4096, "192.0.2.2", "66-1a-2b-3c-4d-02")


def rsr(**settings: object) -> Json:
    return {"Type": "RemoteSubnetRoute", "Settings": settings}


def test_changes_keep_what_hns_holds_in_its_own_spelling_and_remove_the_rest_as_listed() -> None:
    hns_copy = rsr(
        DestinationPrefix="10.65.2.0/26",
        IsolationId=4096,
        ProviderAddress="192.0.2.2",
        DistributedRouterMacAddress="66-1A-2B-3C-4D-02",
        Extra="HNS's own",
    )
    duplicate = {**hns_copy, "Settings": {**hns_copy["Settings"], "Extra": "again"}}
    stale = rsr(
        DestinationPrefix="10.65.9.0/26",
        IsolationId=4096,
        ProviderAddress="192.0.2.9",
        DistributedRouterMacAddress="66-1a-2b-3c-4d-09",
    )
    unreadable = rsr(DestinationPrefix="not a prefix")
    other_vni = rsr(**{**WANTED.policy()["Settings"], "IsolationId": 5000})
    set_policy = {"Type": "SetPolicy", "Settings": {"Id": "x", "Values": "10.0.0.1"}}
    network = {"Policies": [set_policy, hns_copy, duplicate, stale, unreadable, other_vni]}
    other = SubnetRoute("10.65.3.0/26", 4096, "192.0.2.3", "66-1a-2b-3c-4d-03")
    removes, adds = route_changes(network, frozenset({WANTED, other}))
    assert removes == [duplicate, stale, unreadable, other_vni]
    assert adds == [other]


def test_an_empty_network_gets_every_wanted_route_in_a_stable_order() -> None:
    routes = {
        SubnetRoute(f"10.65.{i}.0/26", 4096, f"192.0.2.{i}", "66-00-00-00-00-01") for i in (3, 1, 2)
    }
    assert route_changes({}, frozenset(routes)) == ([], sorted(routes))


_routes = st.builds(
    SubnetRoute,
    st.sampled_from(["10.65.1.0/26", "10.65.2.0/26", "10.65.3.0/26"]),
    st.sampled_from([4096, 4097]),
    st.sampled_from(["192.0.2.1", "192.0.2.2"]),
    st.sampled_from(["66-1a-2b-3c-4d-01", "66-1a-2b-3c-4d-02"]),
)


@given(st.lists(_routes, max_size=6), st.frozensets(_routes, max_size=6))
def test_applying_the_changes_leaves_exactly_the_wanted_routes(
    listed: list[SubnetRoute], wanted: frozenset[SubnetRoute]
) -> None:
    policies = [r.policy() for r in listed]
    removes, adds = route_changes({"Policies": policies}, wanted)
    after = [p for p in policies if not any(p is r for r in removes)]
    after += [r.policy() for r in adds]
    parsed = [parse_route(p) for p in after]
    assert sorted(r for r in parsed if r) == sorted(wanted)
    # Nothing is written that was already there.
    assert len(removes) + len(adds) == len(listed) - len(set(listed) & wanted) + len(
        wanted - set(listed)
    )
