"""VXLAN routes on a simulated Windows VXLAN node, driven by the real loop and managers.

The node is ``node-1`` with an ``Overlay`` network named ``Calico`` (what
Calico's Windows installer creates for VXLAN); Felix's routes and VTEPs
for a small cluster go in, ``RemoteSubnetRoute`` policies come out.
"""

from __future__ import annotations

import logging
import random
from collections import Counter

import pytest
import trio
from google.protobuf.message import Message

from dataplane.windows.hns.hcn import HCN_E_INVALID_POLICY, HcnError, Json
from dataplane.windows.sim.simhost import SimHost
from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.hns import calico_host
from tests.conftest import run_trio
from tests.windows.windows_node import node, send

OVERLAY_ID = "C0FFEE00-0000-4000-8000-0000000000AA"
HOST_SET = {"Type": "SetPolicy", "Settings": {"Id": "others", "PolicyType": "IPSET", "Values": ""}}


def overlay_host(*policies: Json, host: SimHost | None = None) -> SimHost:
    host = host or SimHost()
    host.add_network(
        {
            "ID": OVERLAY_ID,
            "Name": "Calico",
            "Type": "Overlay",
            "Policies": [HOST_SET, *policies],
        }
    )
    return host


def config(**values: str) -> pb.ConfigUpdate:
    return pb.ConfigUpdate(config={"FelixHostname": "node-1", **values})


def vtep(n: int, mac_last: int | None = None) -> pb.VXLANTunnelEndpointUpdate:
    last = n if mac_last is None else mac_last
    return pb.VXLANTunnelEndpointUpdate(
        node=f"node-{n}",
        mac=f"66:1a:2b:3c:4d:{last:02x}",
        ipv4_addr=f"10.65.{n}.0",
        parent_device_ip=f"192.0.2.{n}",
    )


def route(
    dst: str, node_name: str, types: int = pb.REMOTE_WORKLOAD, pool: int = pb.VXLAN
) -> Message:
    return pb.RouteUpdate(
        types=types,  # type: ignore[arg-type]
        ip_pool_type=pool,  # type: ignore[arg-type]
        dst=dst,
        dst_node_name=node_name,
        dst_node_ip=f"192.0.2.{node_name[-1]}" if node_name else "",
    )


def cluster(**values: str) -> list[Message]:
    """Felix's view of a four-node cluster, from node-1."""
    return [
        config(**values),
        vtep(1),
        vtep(2),
        vtep(3),
        route("10.65.0.0/16", "", types=pb.CIDR_INFO),
        route("10.65.1.0/26", "node-1", types=pb.LOCAL_WORKLOAD),
        route("10.65.2.0/26", "node-2"),
        route("10.65.2.64/26", "node-2"),
        route("10.65.3.0/26", "node-3"),
        route("10.66.4.0/26", "node-4", pool=pb.NO_ENCAP),
        route("10.65.5.0/26", "node-5"),  # node-5's VTEP has not arrived
        route("192.0.2.2/32", "node-2", types=pb.REMOTE_HOST, pool=pb.NONE),
        route("fd00:10:65:2::/122", "node-2"),
        pb.InSync(),
    ]


def routes_on(host: SimHost) -> dict[str, tuple[int, str, str]]:
    """DestinationPrefix -> (IsolationId, ProviderAddress, MAC) of the overlay's routes."""
    out = {}
    for policy in host.networks[OVERLAY_ID]["Policies"]:
        if policy["Type"] == "RemoteSubnetRoute":
            s = policy["Settings"]
            assert s["DestinationPrefix"] not in out, "a destination routed twice"
            out[s["DestinationPrefix"]] = (
                s["IsolationId"],
                s["ProviderAddress"],
                s["DistributedRouterMacAddress"],
            )
    return out


def expected(
    vni: int = 4096, node3_mac: str = "66-1a-2b-3c-4d-03"
) -> dict[str, tuple[int, str, str]]:
    return {
        "10.65.2.0/26": (vni, "192.0.2.2", "66-1a-2b-3c-4d-02"),
        "10.65.2.64/26": (vni, "192.0.2.2", "66-1a-2b-3c-4d-02"),
        "10.65.3.0/26": (vni, "192.0.2.3", node3_mac),
    }


def modify_calls(before: Counter[str], host: SimHost) -> int:
    return host.calls["ModifyNetwork"] - before["ModifyNetwork"]


@pytest.mark.parametrize(("values", "vni"), [({}, 4096), ({"VXLANVNI": "4097"}, 4097)])
def test_remote_vxlan_blocks_become_routes_one_call_each(values: dict[str, str], vni: int) -> None:
    host = overlay_host()

    async def main() -> None:
        async with node(host) as (dp, platform):
            await send(dp, *cluster(**values))
            assert dp.in_sync and not platform.quarantined()
            assert "overlay network Calico" in platform.dump()

    run_trio(main)
    assert routes_on(host) == expected(vni)
    assert host.calls["ModifyNetwork"] == 3
    assert HOST_SET in host.networks[OVERLAY_ID]["Policies"]  # not a route: not ours to touch


def test_vtep_and_route_changes_are_one_call_per_difference() -> None:
    host = overlay_host()

    async def main() -> None:
        async with node(host) as (dp, _):
            await send(dp, *cluster())
            before = Counter(host.calls)
            await send(dp, vtep(3, mac_last=0x33))  # node-3's VTEP moved: remove + add
            assert modify_calls(before, host) == 2
            assert routes_on(host) == expected(node3_mac="66-1a-2b-3c-4d-33")
            before = Counter(host.calls)
            await send(dp, pb.VXLANTunnelEndpointRemove(node="node-2"))
            assert modify_calls(before, host) == 2  # its two blocks go with it
            assert set(routes_on(host)) == {"10.65.3.0/26"}
            before = Counter(host.calls)
            await send(dp, vtep(2), vtep(5))  # node-5's block now has its VTEP
            assert modify_calls(before, host) == 3
            before = Counter(host.calls)
            await send(
                dp,
                pb.RouteRemove(dst="10.65.2.64/26"),
                route("10.65.3.0/26", "node-3", pool=pb.NO_ENCAP),  # no longer VXLAN
                route("10.65.2.0/26", "node-2"),  # unchanged: nothing to do
            )
            assert modify_calls(before, host) == 2
            assert set(routes_on(host)) == {"10.65.2.0/26", "10.65.5.0/26"}
            before = Counter(host.calls)
            await send(dp, config(VXLANVNI="4098"))  # every route's VNI changes
            assert modify_calls(before, host) == 4
            assert {v[0] for v in routes_on(host).values()} == {4098}

    run_trio(main)


def test_stale_routes_go_and_routes_already_there_are_adopted() -> None:
    held = {"10.65.2.0/26": (4096, "192.0.2.2", "66-1A-2B-3C-4D-02")}  # HNS's spelling
    stale = {
        "10.65.9.0/26": (4096, "192.0.2.9", "66-1a-2b-3c-4d-09"),  # a node long gone
        "10.65.3.0/26": (4096, "192.0.2.30", "66-1a-2b-3c-4d-03"),  # node-3 before it moved
    }
    host = overlay_host(
        *(
            {
                "Type": "RemoteSubnetRoute",
                "Settings": {
                    "DestinationPrefix": prefix,
                    "IsolationId": vni,
                    "ProviderAddress": pa,
                    "DistributedRouterMacAddress": mac,
                },
            }
            for prefix, (vni, pa, mac) in (held | stale).items()
        )
    )

    async def main() -> None:
        async with node(host) as (dp, _):
            await send(dp, *cluster())

    run_trio(main)
    assert routes_on(host) == expected() | held
    # Two stale removed, 10.65.3.0/26 re-added, 10.65.2.64/26 added; 10.65.2.0/26 kept.
    assert host.calls["ModifyNetwork"] == 4


def test_a_restart_against_the_same_host_makes_no_modify_call() -> None:
    host = overlay_host()

    async def run() -> None:
        async with node(host) as (dp, _):
            await send(dp, *cluster(VXLANVNI="4097"))

    run_trio(run)
    before = Counter(host.calls)
    run_trio(run)
    assert modify_calls(before, host) == 0
    assert routes_on(host) == expected(4097)


def test_routes_changed_behind_our_back_are_repaired_at_refresh() -> None:
    host = overlay_host()

    async def main() -> None:
        async with node(host) as (dp, _):
            await send(dp, *cluster())
            policies = host.networks[OVERLAY_ID]["Policies"]
            policies.remove(next(p for p in policies if p["Type"] == "RemoteSubnetRoute"))
            policies.append(
                {
                    "Type": "RemoteSubnetRoute",
                    "Settings": {
                        "DestinationPrefix": "10.65.7.0/26",
                        "IsolationId": 4096,
                        "ProviderAddress": "192.0.2.7",
                        "DistributedRouterMacAddress": "66-1a-2b-3c-4d-07",
                    },
                }
            )
            before = Counter(host.calls)
            await trio.sleep(100)  # EndpointRefreshInterval (90 s) re-reads HNS
            assert modify_calls(before, host) == 2

    run_trio(main)
    assert routes_on(host) == expected()


def test_removing_a_route_someone_already_removed_is_done_not_refused() -> None:
    host = overlay_host()

    async def main() -> None:
        async with node(host) as (dp, platform):
            await send(dp, *cluster())
            # Gone from HNS after our last listing; our copy still shows it.
            policies = host.networks[OVERLAY_ID]["Policies"]
            (gone,) = [
                p for p in policies if p["Settings"].get("DestinationPrefix") == "10.65.3.0/26"
            ]
            policies.remove(gone)
            await send(dp, pb.VXLANTunnelEndpointRemove(node="node-3"))
            assert not platform.quarantined()

    run_trio(main)
    assert routes_on(host) == {k: v for k, v in expected().items() if k != "10.65.3.0/26"}


class RefusingHost(SimHost):
    """HNS refusing one destination's route (a policy it will not take)."""

    refused = "10.65.2.64/26"
    refusing = True

    def modify_network(self, network_id: str, request: Json) -> None:
        for policy in request["Settings"]["Policies"]:
            if self.refusing and policy["Settings"].get("DestinationPrefix") == self.refused:
                with self._lock:
                    self.calls["ModifyNetwork"] += 1
                raise HcnError("ModifyNetwork", network_id, HCN_E_INVALID_POLICY, "refused")
        super().modify_network(network_id, request)


def test_a_refused_route_is_quarantined_alone_and_retried_with_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host = RefusingHost()
    overlay_host(host=host)

    async def main() -> None:
        async with node(host) as (dp, platform):
            with caplog.at_level(logging.ERROR, logger="dataplane"):
                await send(dp, *cluster())
            assert dp.in_sync and dp.last_apply_error is None
            assert set(routes_on(host)) == {"10.65.2.0/26", "10.65.3.0/26"}
            (what,) = [what for what, _ in platform.quarantined()]
            assert what == f"route 10.65.2.64/26 on network {OVERLAY_ID}"
            before = Counter(host.calls)
            await trio.sleep(600)
            assert 5 <= modify_calls(before, host) <= 12  # 1 s doubling to 5 min
            errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
            assert len(errors) == 1 and "10.65.2.64/26" in errors[0], errors
            host.refusing = False
            await trio.sleep(301)
            assert not platform.quarantined()

    run_trio(main)
    assert routes_on(host) == expected()


def test_random_faults_converge_once_they_stop() -> None:
    rng = random.Random(11)
    faulty = True
    host = overlay_host()
    injected: Counter[str] = Counter()

    def fault(call: str, target: str) -> bool:
        failing = faulty and rng.random() < 0.4
        injected[call] += failing
        return failing

    host.fault = fault

    async def main() -> None:
        nonlocal faulty
        async with node(host) as (dp, platform):
            msgs = cluster()
            await send(dp, *msgs[:-1], vtep(4), route("10.65.4.0/26", "node-4"), msgs[-1])
            await send(dp, pb.VXLANTunnelEndpointRemove(node="node-4"))
            for i in range(10):  # node-3's VTEP flaps while HNS misbehaves
                await send(dp, vtep(3, mac_last=0x30 + i))
                await trio.sleep(20)
            await send(dp, vtep(3))
            faulty = False
            await trio.sleep(600)
            assert dp.last_apply_error is None and not platform.quarantined()

    run_trio(main)
    assert injected["ModifyNetwork"] and injected["EnumerateNetworks"], injected
    assert routes_on(host) == expected()


def test_an_unusable_vni_or_no_overlay_network_writes_nothing_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    overlay, bridge = overlay_host(), calico_host([])

    async def main() -> None:
        async with node(overlay) as (dp, _):
            await send(dp, *cluster(VXLANVNI="100"))
            await send(dp, vtep(3, mac_last=0x33))
        async with node(bridge) as (dp, _):
            await send(dp, *cluster())
            await send(dp, vtep(3, mac_last=0x33))

    with caplog.at_level(logging.WARNING, logger="dataplane"):
        run_trio(main)
    assert overlay.calls["ModifyNetwork"] == bridge.calls["ModifyNetwork"] == 0
    warnings = [r.getMessage() for r in caplog.records if "VXLAN" in r.getMessage()]
    assert warnings == [
        "VXLANVNI 100 is not usable on Windows (must be 4096..65535):"
        " VXLAN routes left as they are",
        "VXLAN routes wanted but none of our HNS networks is an Overlay",
    ]


def test_bad_input_is_one_line_and_changes_nothing_programmed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host = overlay_host()
    msgs = cluster()
    bad = pb.VXLANTunnelEndpointUpdate(
        node="node-3", mac="66:1a:2b:3c:4d", ipv4_addr="10.65.3.0", parent_device_ip="192.0.2.33"
    )

    async def main() -> None:
        async with node(host) as (dp, _):
            await send(dp, *msgs)
            before = Counter(host.calls)
            await send(dp, bad)
            assert modify_calls(before, host) == 0
            assert dp.stats.rejected == 1

    with caplog.at_level(logging.ERROR, logger="dataplane"):
        run_trio(main)
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert line == (
        f"seq={len(msgs) + 1} VXLANTunnelEndpointUpdate rejected: field mac='66:1a:2b:3c:4d':"
        " not a MAC address (six hex octets)"
    )
    assert routes_on(host) == expected()
