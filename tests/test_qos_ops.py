"""``show`` and ``explain`` say a workload's QoS controls."""

from __future__ import annotations

import dataclasses

import trio

from dataplane.core.loop import Dataplane
from dataplane.model import Bandwidth, DirectionQos, PacketRate, QosControls
from dataplane.ops.explain import explain
from dataplane.ops.metrics import Metrics
from dataplane.ops.observer import Observer
from dataplane.ops.records import records
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.test_explain import a, b, node

LIMITS = QosControls(
    ingress=DirectionQos(bandwidth=Bandwidth(8_000_000, 800_000, 12_000_000)),
    egress=DirectionQos(packet_rate=PacketRate(10, 5), max_connections=2),
)


def test_explain_names_the_limits_on_the_path_beside_the_verdict() -> None:
    sender = dataclasses.replace(a(profiles=("open",)), qos=LIMITS)
    receiver = dataclasses.replace(b(profiles=("open",)), qos=LIMITS)
    state = node(sender, receiver)
    answer = explain(state, "10.0.0.1", "10.0.1.5", "tcp", 80)
    limits = [s.note_text for s in answer.steps if s.kind == "qos"]
    assert limits == [
        "egress of k8s/ns/a/eth0 is limited: 10 packets/s (burst 5), at most 2 connections",
        "ingress of k8s/ns/b/eth0 is limited: bandwidth 8Mbit/s (burst 100000 bytes,"
        " peak 12Mbit/s)",
    ]
    assert answer.verdict == "allow"
    plain = explain(
        node(a(profiles=("open",)), b(profiles=("open",))), "10.0.0.1", "10.0.1.5", "tcp", 80
    )
    assert not [s for s in plain.steps if s.kind == "qos"]


def test_show_lists_a_workloads_limits() -> None:
    observer = Observer(SimPlatform(), metrics=Metrics(process=False), wall_clock=lambda: 0.0)
    dp = Dataplane(observer.platform, observer=observer)
    update = pb.WorkloadEndpointUpdate(
        id=pb.WorkloadEndpointID(orchestrator_id="k8s", workload_id="ns/a", endpoint_id="eth0"),
        endpoint=pb.WorkloadEndpoint(state="active", name="calia"),
    )
    update.endpoint.qos_controls.EgressBandwidth = 10_000_000
    update.endpoint.qos_controls.IngressMaxConnections = 3
    dp.send_message(update)
    dp.send_message(pb.InSync())
    dp.close_input()
    trio.run(dp.run)
    (record,) = [r for r in records(observer.snapshot()) if r["kind"] == "workload_endpoint"]
    assert record["qos"] == {
        "ingress": "at most 3 connections",
        "egress": "bandwidth 10Mbit/s (burst 536870912 bytes)",
    }
