"""Wire compatibility with Felix's felixbackend.proto.

The table pins the field numbers Felix uses (the v3.32/v3.33 shapes); a
renumbering here would silently break a real Felix, so it must fail a test.
Every payload of both envelopes must survive a frame round trip.
"""

from __future__ import annotations

from typing import Any

import pytest

from dataplane._pb import felixbackend_pb2 as pb
from dataplane.framing import FrameDecoder, encode_frame

TO_DATAPLANE = {
    "sequence_number": 15,
    "in_sync": 1,
    "ipset_update": 2,
    "ipset_delta_update": 3,
    "ipset_remove": 4,
    "active_profile_update": 5,
    "active_profile_remove": 6,
    "active_policy_update": 7,
    "active_policy_remove": 8,
    "host_endpoint_update": 9,
    "host_endpoint_remove": 10,
    "workload_endpoint_update": 11,
    "workload_endpoint_remove": 12,
    "config_update": 13,
    "host_metadata_update": 14,
    "ipam_pool_update": 16,
    "ipam_pool_remove": 17,
    "host_metadata_remove": 18,
    "service_account_update": 19,
    "service_account_remove": 20,
    "namespace_update": 21,
    "namespace_remove": 22,
    "route_update": 23,
    "route_remove": 24,
    "vtep_update": 25,
    "vtep_remove": 26,
    "wireguard_endpoint_update": 27,
    "wireguard_endpoint_remove": 28,
    "global_bgp_config_update": 29,
    "encapsulation": 30,
    "service_update": 31,
    "service_remove": 32,
    "wireguard_endpoint_v6_update": 33,
    "wireguard_endpoint_v6_remove": 34,
    "host_metadata_v6_update": 35,
    "host_metadata_v6_remove": 36,
    "host_metadata_v4v6_update": 37,
    "host_metadata_v4v6_remove": 38,
}
FROM_DATAPLANE = {
    "sequence_number": 8,
    "process_status_update": 3,
    "host_endpoint_status_update": 4,
    "host_endpoint_status_remove": 5,
    "workload_endpoint_status_update": 6,
    "workload_endpoint_status_remove": 7,
    "wireguard_status_update": 9,
    "dataplane_in_sync": 10,
}
# Shapes the issue calls out as current Felix.
SPOT_CHECKS = [
    (pb.PolicyID, {"name": 2, "namespace": 3, "kind": 4}),
    (pb.Policy, {"tier": 8, "namespace": 5, "untracked": 3, "pre_dnat": 4}),
    (pb.TierInfo, {"name": 1, "ingress_policies": 2, "egress_policies": 3, "default_action": 4}),
    (pb.RouteUpdate, {"types": 12, "dst": 3, "dst_node_name": 4, "dst_node_ip": 5}),
    (pb.Rule, {"action": 1, "dst_ip_port_set_ids": 15, "not_protocol": 102, "rule_id": 201}),
    (pb.WorkloadEndpoint, {"name": 2, "tiers": 7, "allow_spoofed_source_prefixes": 10}),
    (pb.HostEndpoint, {"untracked_tiers": 6, "pre_dnat_tiers": 7, "forward_tiers": 8}),
    (pb.ServiceUpdate, {"cluster_ips": 4, "ports": 7, "loadbalancer_ingress_ips": 8}),
]


def _numbers(descriptor: Any) -> dict[str, int]:
    return {f.name: f.number for f in descriptor.fields}


def test_envelope_field_numbers_match_felix() -> None:
    to_fields = _numbers(pb.ToDataplane.DESCRIPTOR)
    from_fields = _numbers(pb.FromDataplane.DESCRIPTOR)
    assert {k: to_fields[k] for k in TO_DATAPLANE} == TO_DATAPLANE
    assert {k: from_fields[k] for k in FROM_DATAPLANE} == FROM_DATAPLANE


@pytest.mark.parametrize(("message", "expected"), SPOT_CHECKS)
def test_current_felix_shapes(message: type, expected: dict[str, int]) -> None:
    numbers = _numbers(message.DESCRIPTOR)  # type: ignore[attr-defined]
    assert {k: numbers[k] for k in expected} == expected
    assert pb.RouteType.Value("LOCAL_WORKLOAD") == 4  # a bitmap, not 0..6


def test_our_extensions_are_numbered_from_1000() -> None:
    assert _numbers(pb.ToDataplane.DESCRIPTOR)["service_backends_update"] >= 1000
    for name, number in _numbers(pb.ServiceUpdate.DESCRIPTOR).items():
        assert number < 100 or number >= 1000, name
    assert _numbers(pb.ServicePort.DESCRIPTOR)["name"] >= 1000


@pytest.mark.parametrize(
    "field", [f for f in pb.ToDataplane.DESCRIPTOR.oneofs_by_name["payload"].fields]
)
def test_every_to_dataplane_payload_decodes(field: object) -> None:
    name = field.name  # type: ignore[attr-defined]
    envelope = pb.ToDataplane(sequence_number=77)
    getattr(envelope, name).SetInParent()
    (decoded,) = FrameDecoder().feed(encode_frame(envelope))
    assert decoded.WhichOneof("payload") == name and decoded.sequence_number == 77


@pytest.mark.parametrize(
    "field", [f for f in pb.FromDataplane.DESCRIPTOR.oneofs_by_name["payload"].fields]
)
def test_every_from_dataplane_payload_round_trips(field: object) -> None:
    name = field.name  # type: ignore[attr-defined]
    envelope = pb.FromDataplane(sequence_number=5)
    getattr(envelope, name).SetInParent()
    again = pb.FromDataplane.FromString(encode_frame(envelope)[8:])
    assert again.WhichOneof("payload") == name
