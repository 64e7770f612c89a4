"""Service load balancers on a simulated host: counted calls, adoption, repair, ownership.

Driven by the real loop and managers under trio's MockClock; HCN calls run
inline, so a settled loop has finished every call.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import trio

from dataplane.windows.hns.hcn import HnsVersion, writes
from dataplane.windows.services.lb_state import OwnedIds
from dataplane.windows.sim.simhost import SimHost
from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.hns import NETWORK_ID, add_pod
from tests.conftest import run_trio
from tests.kernel import scenario as sc
from tests.windows.services_node import (
    LOCAL_V4,
    NODE_B_ADDRESS,
    REMOTE_V4,
    backend,
    backends,
    messages,
    node_b,
    overlay_host,
    service,
)
from tests.windows.windows_node import node, send

OLD, NEW = HnsVersion(12, 0), HnsVersion(15, 4)


def delta(before: Counter[str], host: SimHost) -> Counter[str]:
    """Calls made since ``before``, reads left out."""
    return writes(host.calls - before)


def remote_endpoints(host: SimHost) -> dict[str, str]:
    """Our remote endpoints: address -> provider address."""
    out = {}
    for ep in host.endpoints.values():
        if str(ep.get("Name", "")).startswith("dataplane-remote-"):
            (policy,) = ep["Policies"]
            out[ep["IpConfigurations"][0]["IpAddress"]] = policy["Settings"]["ProviderAddress"]
    return out


def frontends(host: SimHost) -> Counter[tuple[str, int]]:
    return Counter(
        ((lb.get("FrontendVIPs") or [""])[0], lb["PortMappings"][0]["ExternalPort"])
        for lb in host.load_balancers.values()
    )


@pytest.mark.parametrize("version", [OLD, NEW], ids=str)
def test_one_backend_change_costs_one_call_in_place_and_two_before(version: HnsVersion) -> None:
    host = overlay_host(version)
    lb_calls = (
        Counter(ModifyLoadBalancer=1)
        if version >= NEW
        else Counter(DeleteLoadBalancer=1, CreateLoadBalancer=1)
    )

    async def main() -> None:
        async with node(host) as (dp, _):
            await send(dp, *messages(service("web"), backends("web", *LOCAL_V4, *REMOTE_V4[:2])))
            assert len(host.load_balancers) == 1
            assert remote_endpoints(host) == {a: NODE_B_ADDRESS for a in REMOTE_V4[:2]}

            before = Counter(host.calls)  # a local backend more
            await send(dp, backends("web", *LOCAL_V4, sc.PODS[3].ipv4, *REMOTE_V4[:2]))
            assert delta(before, host) == lb_calls

            before = Counter(host.calls)  # a remote backend more: its endpoint first
            await send(dp, backends("web", *LOCAL_V4, sc.PODS[3].ipv4, *REMOTE_V4))
            assert delta(before, host) == lb_calls + Counter(CreateEndpoint=1)

            before = Counter(host.calls)  # a remote backend gone: its endpoint after
            await send(dp, backends("web", *LOCAL_V4, sc.PODS[3].ipv4, *REMOTE_V4[1:]))
            assert delta(before, host) == lb_calls + Counter(DeleteEndpoint=1)
            assert set(remote_endpoints(host)) == set(REMOTE_V4[1:])

            before = Counter(host.calls)  # the same backends again: nothing
            await send(dp, backends("web", *reversed([*LOCAL_V4, sc.PODS[3].ipv4, *REMOTE_V4[1:]])))
            assert delta(before, host) == Counter()

            before = Counter(host.calls)  # the service gone: its LB, then its remote endpoints
            await send(dp, pb.ServiceRemove(name="web", namespace="prod"))
            assert delta(before, host) == Counter(DeleteLoadBalancer=1, DeleteEndpoint=2)
            assert host.load_balancers == {} and remote_endpoints(host) == {}

    run_trio(main)


def _start(host: SimHost, owned: Path, *msgs: pb.ToDataplane | object) -> None:
    async def main() -> None:
        async with node(host, owned_load_balancers=OwnedIds(owned)) as (dp, _):
            await send(dp, *msgs)  # type: ignore[arg-type]

    run_trio(main)


WEB = (service("web"), backends("web", *LOCAL_V4, *REMOTE_V4))
DNS = (
    service(
        "dns",
        cluster_ips=["10.96.0.53"],
        ports=[pb.ServicePort(Protocol="UDP", Port=53, name="dns")],
    ),
    backends(
        "dns",
        *(backend(a, name="dns", protocol="UDP", port=5353) for a in (LOCAL_V4[0], REMOTE_V4[0])),
    ),
)


def test_a_restart_adopts_what_it_made_and_removes_only_its_own_leftovers(tmp_path: Path) -> None:
    owned = tmp_path / "lbs.json"
    host = overlay_host()
    foreign = host.create_load_balancer(  # kube-proxy's, say: never ours to touch
        {
            "HostComputeEndpoints": [next(iter(host.endpoints))],
            "FrontendVIPs": ["10.96.9.9"],
            "PortMappings": [{"Protocol": 6, "InternalPort": 80, "ExternalPort": 80}],
        }
    )
    _start(host, owned, *messages(*WEB, *DNS))
    assert len(host.load_balancers) == 3
    ids = set(json.loads(owned.read_text())["LoadBalancers"])
    assert len(ids) == 2 and foreign["ID"] not in ids

    before = Counter(host.calls)  # the same state again: nothing to do
    _start(host, owned, *messages(*WEB, *DNS))
    assert delta(before, host) == Counter()

    before = Counter(host.calls)  # dns went while the driver was down
    _start(host, owned, *messages(*WEB))
    assert delta(before, host) == Counter(DeleteLoadBalancer=1)
    assert frontends(host) == Counter({("10.96.0.10", 80): 1, ("10.96.9.9", 80): 1})
    assert foreign["ID"] in host.load_balancers
    assert len(json.loads(owned.read_text())["LoadBalancers"]) == 1


def test_without_the_state_file_nothing_is_ours_and_a_taken_frontend_is_reported(
    tmp_path: Path,
) -> None:
    """The refused load balancer is held back alone: another service lands in the same apply."""
    host = overlay_host()
    _start(host, tmp_path / "lbs.json", *messages(*WEB))
    (kept,) = host.load_balancers.values()

    async def main() -> None:
        async with node(host, owned_load_balancers=OwnedIds(tmp_path / "other.json")) as (
            dp,
            platform,
        ):
            await send(dp, *messages(*WEB, *DNS))
            ((where, why),) = [
                q for q in platform.quarantined() if q[0].startswith("load balancer")
            ]
            assert where == "load balancer tcp 10.96.0.10:80"
            assert "0x800700B7" in why.reason  # the frontend is taken
            assert "refused 1 time(s)" in platform.dump()

    run_trio(main)
    assert kept in host.load_balancers.values()  # not ours: untouched
    assert frontends(host) == Counter({("10.96.0.10", 80): 1, ("10.96.0.53", 53): 1})


def test_what_hns_lost_is_back_within_one_refresh() -> None:
    host = overlay_host()

    async def main() -> None:
        async with node(host) as (dp, _):
            await send(dp, *messages(*WEB, *DNS))
            wanted = frontends(host), remote_endpoints(host)
            # An HNS restart: load balancers and remote endpoints gone.
            host.load_balancers.clear()
            for endpoint_id in [i for i, e in host.endpoints.items() if e.get("Flags")]:
                del host.endpoints[endpoint_id]
            before = Counter(host.calls)
            await trio.sleep(100)  # past the refresh interval (90 s)
            assert (frontends(host), remote_endpoints(host)) == wanted
            assert delta(before, host) == Counter(CreateLoadBalancer=2, CreateEndpoint=3)

    run_trio(main)


def test_remote_backends_wait_for_their_nodes_vtep_and_follow_it() -> None:
    host = overlay_host()
    msgs = [m for m in messages(*WEB) if not isinstance(m, pb.VXLANTunnelEndpointUpdate)]

    async def main() -> None:
        async with node(host) as (dp, platform):
            await send(dp, *msgs)
            (lb,) = host.load_balancers.values()
            assert len(lb["HostComputeEndpoints"]) == len(LOCAL_V4)
            assert "no VTEP yet" in platform.dump()
            await send(dp, node_b())
            (lb,) = host.load_balancers.values()
            assert len(lb["HostComputeEndpoints"]) == len(LOCAL_V4) + len(REMOTE_V4)
            # node-b moves: its pods' remote endpoints are replaced.
            await send(dp, node_b("192.168.1.99"))
            assert remote_endpoints(host) == {a: "192.168.1.99" for a in REMOTE_V4}
            (lb,) = host.load_balancers.values()
            assert len(lb["HostComputeEndpoints"]) == len(LOCAL_V4) + len(REMOTE_V4)

    run_trio(main)
    assert all(
        e["HostComputeNetwork"] == NETWORK_ID
        for e in host.endpoints.values()
        if e.get("Flags") == 1 and str(e.get("Name")).startswith("dataplane-")
    )


def test_a_local_backend_joins_once_the_cni_has_made_its_endpoint() -> None:
    host = overlay_host()

    async def main() -> None:
        async with node(host) as (dp, platform):
            extra = backend(sc.EXTRA.ipv4, local=True)  # its pod's endpoint not there yet
            await send(dp, *messages(service("web"), backends("web", *LOCAL_V4, extra)))
            (lb,) = host.load_balancers.values()
            assert len(lb["HostComputeEndpoints"]) == len(LOCAL_V4)
            assert "its pod's HNS endpoint not found yet" in platform.dump()
            add_pod(host, sc.EXTRA)  # the CNI, moments later
            before = Counter(host.calls)
            await trio.sleep(3)  # looked for again every 2 s
            (lb,) = host.load_balancers.values()
            assert len(lb["HostComputeEndpoints"]) == len(LOCAL_V4) + 1
            assert delta(before, host) == Counter(ModifyLoadBalancer=1)

    run_trio(main)
