"""Services a node cannot program as asked are said so, shown as errors, and keep it unready.

An Overlay network without ``WindowsServiceSourceVIP`` cannot take a load
balancer at all: one line names the key and the network at start and
whenever services arrive, every service reports the reason. Two services
claiming one frontend (a cluster IP that is another's external IP) keep
one, the same one whatever the order, and the other reports why.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from dataplane.core.loop import Dataplane
from dataplane.core.platform import ObjectError
from dataplane.ops.explain import explain
from dataplane.ops.metrics import Metrics
from dataplane.ops.observer import Observer
from dataplane.sim import SimPlatform
from dataplane.windows.hns.acl import Packet
from dataplane.windows.sim.lb_verdict import service_route
from dataplane.windows.sim.verdict import packet_verdict
from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.hns import NETWORK_ID
from tests.conftest import run_trio
from tests.windows.services_node import LOCAL_V4, backends, overlay_host, service
from tests.windows.services_node import messages as service_messages
from tests.windows.test_lb_programmer import frontends
from tests.windows.windows_node import node, send

NO_VIP = "an Overlay network needs WindowsServiceSourceVIP for IPv4"


def test_no_source_vip_is_said_at_start_and_as_services_arrive(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host = overlay_host()
    web = (service("web"), backends("web", *LOCAL_V4))
    dns = (service("dns", cluster_ips=["10.96.0.53"]), backends("dns", *LOCAL_V4))

    async def main() -> None:
        async with node(host) as (dp, platform):
            await send(dp, *service_messages(WindowsServiceSourceVIP=""))
            await send(dp, *web)
            assert platform.object_errors() == [
                ObjectError("service", "prod/web", f"tcp 10.96.0.10:80: not programmed, {NO_VIP}")
            ]
            await send(dp, *dns)
            assert [e.id for e in platform.object_errors()] == ["prod/dns", "prod/web"]
            assert host.load_balancers == {}  # never a silent partial set

    with caplog.at_level(logging.WARNING, logger="dataplane.windows"):
        run_trio(main)
    lines = [
        r.getMessage() for r in caplog.records if "WindowsServiceSourceVIP is" in r.getMessage()
    ]
    said = f"WindowsServiceSourceVIP is not set: the Overlay network Calico ({NETWORK_ID.upper()})"
    assert [line.removeprefix(said) for line in lines] == [
        " needs it for service load balancers; 0 service(s) not programmed",
        " needs it for service load balancers; 1 service(s) not programmed",
        " needs it for service load balancers; 2 service(s) not programmed",
    ]


@pytest.mark.parametrize("order", ["cluster first", "external first"])
def test_one_frontend_two_services_keeps_one_whatever_the_order(order: str) -> None:
    host = overlay_host()
    a = (service("a-web"), backends("a-web", LOCAL_V4[0]))
    b = (
        service("b-ext", cluster_ips=["10.96.0.99"], external_ips=["10.96.0.10"]),
        backends("b-ext", LOCAL_V4[1]),
    )
    first, second = (a, b) if order == "cluster first" else (b, a)

    async def main() -> None:
        async with node(host) as (dp, platform):
            await send(dp, *service_messages(*first))
            await send(dp, *second)
            assert frontends(host)[("10.96.0.10", 80)] == 1
            assert platform.object_errors() == [
                ObjectError(
                    "service",
                    "prod/b-ext",
                    "tcp 10.96.0.10:80: frontend also claimed by prod/a-web, which keeps it",
                )
            ]
            (kept,) = [
                lb for lb in host.load_balancers.values() if lb["FrontendVIPs"] == ["10.96.0.10"]
            ]
            (ip,) = [
                e["IpConfigurations"][0]["IpAddress"]
                for e in host.endpoints.values()
                if e["ID"] in {i.upper() for i in kept["HostComputeEndpoints"]}
            ]
            assert ip == LOCAL_V4[0]  # a-web's backend, not b-ext's
            await send(dp, pb.ServiceRemove(name="a-web", namespace="prod"))
            assert platform.object_errors() == []  # b-ext takes the frontend over

    run_trio(main)


def test_source_ranges_hns_cannot_enforce_fail_closed_and_say_so() -> None:
    host = overlay_host()
    lb = service(
        "shop",
        type="LoadBalancer",
        loadbalancer_ingress_ips=["198.51.100.10"],
        load_balancer_source_ranges=["203.0.113.0/24"],
    )

    async def main() -> None:
        async with node(host) as (dp, platform):
            await send(dp, *service_messages(lb, backends("shop", *LOCAL_V4)))
            (error,) = platform.object_errors()
            assert (error.kind, error.id) == ("service", "prod/shop")
            assert "loadBalancerSourceRanges (203.0.113.0/24) cannot be enforced" in error.reason
            # No source reaches the load balancer IP, not even an allowed one:
            # an HNS load balancer has no source filter and the backends' ACLs
            # see the backend's address after the NAT, so letting only the
            # ranges in cannot be said; closed is the side that stays safe.
            state = host.snapshot()
            assert service_route(state, "198.51.100.10", "tcp", 80) is None  # for any source
            for source in ("203.0.113.7", "192.0.2.9"):  # in the ranges, outside them
                to_backend = packet_verdict(state, Packet(source, LOCAL_V4[0], 6, 40000, 80))
                assert to_backend.allowed, source  # no ACL written for it: nothing else cut
            # In the cluster the service is as before, and pod to pod is untouched.
            inside = service_route(state, "10.96.0.10", "tcp", 80)
            assert inside is not None
            assert {t.address for t in inside.backends} == set(LOCAL_V4)
            for src, dst in ((LOCAL_V4[1], LOCAL_V4[0]), (LOCAL_V4[0], LOCAL_V4[2])):
                assert packet_verdict(state, Packet(src, dst, 6, 40000, 80)).allowed

    run_trio(main)


def test_explain_says_the_unenforceable_frontend_drops_every_source() -> None:
    lb = service(
        "shop",
        type="LoadBalancer",
        loadbalancer_ingress_ips=["198.51.100.10"],
        load_balancer_source_ranges=["203.0.113.0/24"],
    )
    observer = Observer(SimPlatform(), metrics=Metrics(process=False))
    dataplane = Dataplane(observer.platform, observer=observer)
    for msg in service_messages(lb, backends("shop", *LOCAL_V4)):
        dataplane.send_message(msg)
    dataplane.close_input()
    trio.run(dataplane.run)
    state = observer.platform.publish().state
    for platform, verdict in (("windows", "deny"), ("linux", "allow")):
        said = explain(state, "203.0.113.7", "198.51.100.10", "tcp", 80, platform=platform)
        assert said.to_json()["verdict"] == verdict, platform
    said = explain(state, "203.0.113.7", "198.51.100.10", "tcp", 80, platform="windows")
    answer: dict[str, Any] = said.to_json()
    decided = answer["decided_by"]
    assert decided["rule"] == "unenforceable"
