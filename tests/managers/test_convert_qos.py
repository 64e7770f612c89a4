"""QoS controls at the edge: Calico's ranges and defaults, one line naming a bad field."""

from __future__ import annotations

import pytest

from dataplane.errors import InputError
from dataplane.managers.convert_qos import dscp_policies, qos_controls
from dataplane.model import (
    NO_QOS,
    Bandwidth,
    DirectionQos,
    DscpPolicy,
    PacketRate,
    QosControls,
)
from dataplane.wire._pb import felixbackend_pb2 as pb


def _endpoint(**controls: int) -> pb.WorkloadEndpoint:
    ep = pb.WorkloadEndpoint(name="cali1")
    ep.qos_controls.CopyFrom(pb.QoSControls(**controls))
    return ep


def test_no_controls_and_all_zero_controls_are_no_qos() -> None:
    assert qos_controls(pb.WorkloadEndpoint(name="cali1"), "e") is NO_QOS
    assert qos_controls(_endpoint(), "e") is NO_QOS


def test_calicos_defaults_fill_a_zero_burst() -> None:
    got = qos_controls(
        _endpoint(IngressBandwidth=10_000_000, EgressPacketRate=10, EgressMaxConnections=3), "e"
    )
    assert got == QosControls(
        ingress=DirectionQos(bandwidth=Bandwidth(10_000_000, 4 * 2**30)),
        egress=DirectionQos(packet_rate=PacketRate(10, 5), max_connections=3),
    )


@pytest.mark.parametrize(
    ("controls", "field", "value"),
    [
        ({"IngressBandwidth": 999}, "IngressBandwidth", 999),
        ({"EgressBandwidth": -1}, "EgressBandwidth", -1),
        ({"IngressBandwidth": 10**6, "IngressBurst": 8 * 2**32}, "IngressBurst", 8 * 2**32),
        ({"IngressBurst": 10_000}, "IngressBurst", 10_000),  # with no bandwidth
        ({"EgressBandwidth": 10**6, "EgressPeakrate": 10**6}, "EgressPeakrate", 10**6),
        ({"EgressBandwidth": 10**6, "EgressMinburst": 1500}, "EgressMinburst", 1500),
        ({"IngressPacketRate": 10_001}, "IngressPacketRate", 10_001),
        ({"IngressPacketRate": 10, "IngressPacketBurst": 0x10000}, "IngressPacketBurst", 0x10000),
        ({"EgressPacketBurst": 5}, "EgressPacketBurst", 5),
        ({"IngressMaxConnections": 2**32}, "IngressMaxConnections", 2**32),
        ({"EgressMaxConnections": -3}, "EgressMaxConnections", -3),
    ],
)
def test_out_of_range_is_refused_naming_the_field(
    controls: dict[str, int], field: str, value: int
) -> None:
    with pytest.raises(InputError) as caught:
        qos_controls(_endpoint(**controls), "endpoint.qos_controls")
    assert caught.value.field == f"endpoint.qos_controls.{field}"
    assert caught.value.value == value


def test_dscp_policies_take_six_bits_and_a_network() -> None:
    policies = [pb.QoSPolicy(dscp=46), pb.QoSPolicy(dscp=10, destination="192.0.2.7/24")]
    assert dscp_policies(policies, "e") == (DscpPolicy(46), DscpPolicy(10, "192.0.2.0/24"))
    for bad, field, value in (
        (pb.QoSPolicy(dscp=64), "e[0].dscp", 64),
        (pb.QoSPolicy(dscp=-1), "e[0].dscp", -1),
        (pb.QoSPolicy(dscp=1, destination="not-a-net"), "e[0].destination", "not-a-net"),
    ):
        with pytest.raises(InputError) as caught:
            dscp_policies([bad], "e")
        assert (caught.value.field, caught.value.value) == (field, value)
