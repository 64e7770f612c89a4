"""HostEndpointWriter: which endpoint polices each interface."""

from __future__ import annotations

from dataplane.linux.writers.hosts import HostEndpointWriter
from dataplane.model import HostEffectivePolicy, HostEndpoint, HostEndpointKey


def test_the_lowest_id_wins_an_interface_whatever_the_arrival_order() -> None:
    # Felix's rule: two endpoints naming one interface (or two "*") -> lowest id.
    endpoints = [
        HostEndpoint(HostEndpointKey("b-uplink"), name="eth0"),
        HostEndpoint(HostEndpointKey("a-uplink"), name="eth0"),
        HostEndpoint(HostEndpointKey("z-all"), name=""),
        HostEndpoint(HostEndpointKey("y-all"), name=""),
        HostEndpoint(HostEndpointKey("c-other"), name="eth1"),
    ]
    for order in (endpoints, endpoints[::-1]):
        writer = HostEndpointWriter()
        for endpoint in order:
            writer.set(endpoint, HostEffectivePolicy())
        active = [(h.name, h.key.endpoint_id) for h, _ in writer.active()]
        assert active == [("", "y-all"), ("eth0", "a-uplink"), ("eth1", "c-other")]
    writer.remove(HostEndpointKey("a-uplink"))
    assert [h.key.endpoint_id for h, _ in writer.active()] == ["y-all", "b-uplink", "c-other"]
