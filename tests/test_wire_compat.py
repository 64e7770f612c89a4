"""Wire compatibility with Felix's felixbackend.proto.

The table pins the field numbers Felix uses (the v3.32/v3.33 shapes); a
renumbering here would silently break a real Felix, so it must fail a test.
Every ToDataplane payload kind has a decided destination (a manager, the
loop, or ignored) and, sent through the real loop, lands there; the driver
emits exactly the FromDataplane kinds it claims to.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest
import trio
import trio.testing
from google.protobuf.message import Message

from dataplane.core.loop import Dataplane
from dataplane.sim import SimPlatform, SimState
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.msgs import payload_of
from tests.conftest import ipset, run_trio, workload

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


# --- Every ToDataplane payload kind has a decided destination -----------------
#
# A payload kind is routed to the manager(s) whose ``handles`` include its
# type, is acted on by the loop itself, or is ignored. A kind added to the
# proto without a decision here fails ``test_every_to_dataplane_payload_*``.
# For managers, the second value is the SimState slice the message must
# change once applied (and the only one of these slices it may change).
_IGNORED = ("ignored", None)
ROUTES: dict[str, tuple[str, str | None]] = {
    "in_sync": ("loop", None),
    "config_update": ("loop", None),
    "ipset_update": ("IPSetsManager", "ipsets"),
    "ipset_delta_update": ("IPSetsManager", "ipsets"),
    "ipset_remove": ("IPSetsManager", "ipsets"),
    "active_profile_update": ("PolicyManager", "profiles"),
    "active_profile_remove": ("PolicyManager", "profiles"),
    "active_policy_update": ("PolicyManager", "policies"),
    "active_policy_remove": ("PolicyManager", "policies"),
    "host_endpoint_update": ("EndpointManager", "host_endpoints"),
    "host_endpoint_remove": ("EndpointManager", "host_endpoints"),
    "workload_endpoint_update": ("EndpointManager", "workload_endpoints"),
    "workload_endpoint_remove": ("EndpointManager", "workload_endpoints"),
    "ipam_pool_update": ("PoolsManager", "ip_pools"),
    "ipam_pool_remove": ("PoolsManager", "ip_pools"),
    "service_update": ("ServicesManager", "services"),
    "service_remove": ("ServicesManager", "services"),
    "service_backends_update": ("ServicesManager", "services"),
    "host_metadata_update": ("HostsManager", "hosts"),
    "host_metadata_remove": ("HostsManager", "hosts"),
    # v3.30-v3.32's split host messages: merged by the wire layer into the
    # HostMetadataUpdate/Remove master sends, which HostsManager handles.
    "host_metadata_v6_update": ("wire", "hosts"),
    "host_metadata_v6_remove": ("wire", "hosts"),
    "host_metadata_v4v6_update": ("wire", "hosts"),
    "host_metadata_v4v6_remove": ("wire", "hosts"),
    "service_account_update": _IGNORED,
    "service_account_remove": _IGNORED,
    "namespace_update": _IGNORED,
    "namespace_remove": _IGNORED,
    "route_update": ("RoutesManager", "routes"),
    "route_remove": ("RoutesManager", "routes"),
    "vtep_update": ("RoutesManager", "vteps"),
    "vtep_remove": ("RoutesManager", "vteps"),
    "wireguard_endpoint_update": _IGNORED,
    "wireguard_endpoint_remove": _IGNORED,
    "wireguard_endpoint_v6_update": _IGNORED,
    "wireguard_endpoint_v6_remove": _IGNORED,
    "global_bgp_config_update": _IGNORED,
    "encapsulation": ("HostsManager", "encapsulation"),
}

_WEP_ID = pb.WorkloadEndpointID(orchestrator_id="k8s", workload_id="ns/a", endpoint_id="eth0")
_HEP_ID = pb.HostEndpointID(endpoint_id="node-eth0")
_HTTP = pb.ServiceBackendPort(name="http", protocol="TCP", port=8080)


def _service(name: str, port: int = 80) -> pb.ServiceUpdate:
    return pb.ServiceUpdate(
        name=name,
        namespace="prod",
        type="ClusterIP",
        cluster_ips=["10.96.0.10"],
        ports=[pb.ServicePort(Protocol="TCP", Port=port, name="http")],
    )


def _backends(*addresses: str) -> pb.ServiceBackendsUpdate:
    return pb.ServiceBackendsUpdate(
        name="web",
        namespace="prod",
        backends=[pb.ServiceBackend(addresses=[a], ports=[_HTTP]) for a in addresses],
    )


# One object of every managed kind, programmed before the message under test
# so that removes and deltas have something to act on.
BASELINE: list[Message] = [
    ipset("s:a", "10.0.0.1"),
    pb.ActivePolicyUpdate(id=pb.PolicyID(name="p"), policy=pb.Policy(tier="default")),
    pb.ActiveProfileUpdate(id=pb.ProfileID(name="prof"), profile=pb.Profile()),
    workload("ns/a", "cali1", "10.0.0.1/32"),
    pb.HostEndpointUpdate(id=_HEP_ID, endpoint=pb.HostEndpoint(name="eth0")),
    pb.IPAMPoolUpdate(id="pool", pool=pb.IPAMPool(cidr="10.0.0.0/16")),
    _service("web"),
    _backends("10.65.0.20"),
    pb.RouteUpdate(types=pb.REMOTE_WORKLOAD, dst="10.0.1.0/26", dst_node_name="n2"),
    pb.VXLANTunnelEndpointUpdate(
        node="n2", mac="66:1a:2b:3c:4d:5e", ipv4_addr="10.0.1.0", parent_device_ip="192.0.2.2"
    ),
    pb.HostMetadataUpdate(hostname="n2", ipv4_addr="192.0.2.2/24", ipv6_addr="fd00::2/64"),
    pb.Encapsulation(ipip_enabled=True),
]
# The same, as a v3.30-v3.32 Felix says it (the split host messages can only
# follow that; after master's form they are a format error).
LEGACY_BASELINE = [
    *BASELINE[:-2],
    pb.HostMetadataUpdate(hostname="n2", ipv4_addr="192.0.2.2"),
    pb.HostMetadataV4V6Update(hostname="n2", ipv4_addr="192.0.2.2/24", ipv6_addr="fd00::2/64"),
    pb.HostMetadataUpdate(hostname="n4", ipv4_addr="192.0.2.4"),
    pb.HostMetadataV6Update(hostname="n4", ipv6_addr="fd00::4"),
    BASELINE[-1],
]
# A minimal valid message per kind that has a destination other than
# "ignored"; ignored kinds are sent empty (nothing reads them).
MESSAGES: dict[str, Message] = {
    "in_sync": pb.InSync(),
    "config_update": pb.ConfigUpdate(config={"ReportingIntervalSecs": "7"}),
    "ipset_update": ipset("s:b", "10.0.0.2"),
    "ipset_delta_update": pb.IPSetDeltaUpdate(id="s:a", added_members=["10.0.0.2"]),
    "ipset_remove": pb.IPSetRemove(id="s:a"),
    "active_profile_update": pb.ActiveProfileUpdate(
        id=pb.ProfileID(name="prof2"), profile=pb.Profile()
    ),
    "active_profile_remove": pb.ActiveProfileRemove(id=pb.ProfileID(name="prof")),
    "active_policy_update": pb.ActivePolicyUpdate(
        id=pb.PolicyID(name="p2"), policy=pb.Policy(tier="default")
    ),
    "active_policy_remove": pb.ActivePolicyRemove(id=pb.PolicyID(name="p")),
    "host_endpoint_update": pb.HostEndpointUpdate(
        id=pb.HostEndpointID(endpoint_id="node-eth1"), endpoint=pb.HostEndpoint(name="eth1")
    ),
    "host_endpoint_remove": pb.HostEndpointRemove(id=_HEP_ID),
    "workload_endpoint_update": workload("ns/b", "cali2", "10.0.0.2/32"),
    "workload_endpoint_remove": pb.WorkloadEndpointRemove(id=_WEP_ID),
    "ipam_pool_update": pb.IPAMPoolUpdate(id="pool2", pool=pb.IPAMPool(cidr="10.1.0.0/16")),
    "ipam_pool_remove": pb.IPAMPoolRemove(id="pool"),
    # A change to a service whose backends are known (one alone is programmed
    # only once they arrive: dataplane/managers/services.py).
    "service_update": _service("web", port=8080),
    "service_remove": pb.ServiceRemove(name="web", namespace="prod"),
    "service_backends_update": _backends("10.65.0.20", "10.65.0.21"),
    "route_update": pb.RouteUpdate(types=pb.REMOTE_WORKLOAD, dst="10.0.2.0/26", dst_node_name="n3"),
    "route_remove": pb.RouteRemove(dst="10.0.1.0/26"),
    "vtep_update": pb.VXLANTunnelEndpointUpdate(
        node="n3", mac="66:1a:2b:3c:4d:5f", ipv4_addr="10.0.2.0", parent_device_ip="192.0.2.3"
    ),
    "vtep_remove": pb.VXLANTunnelEndpointRemove(node="n2"),
    "host_metadata_update": pb.HostMetadataUpdate(hostname="n3", ipv4_addr="192.0.2.3/24"),
    "host_metadata_remove": pb.HostMetadataRemove(hostname="n2"),
    "host_metadata_v6_update": pb.HostMetadataV6Update(hostname="n2", ipv6_addr="fd00::3"),
    "host_metadata_v6_remove": pb.HostMetadataV6Remove(hostname="n4"),
    "host_metadata_v4v6_update": pb.HostMetadataV4V6Update(hostname="n3", ipv4_addr="192.0.2.3"),
    "host_metadata_v4v6_remove": pb.HostMetadataV4V6Remove(hostname="n2"),
    "encapsulation": pb.Encapsulation(vxlan_enabled=True),
}
# What the loop logs at INFO and above for the message under test; a kind a
# manager handles logs nothing there.
LOOP_LINES = {
    "in_sync": [
        "seq={seq} InSync received; programming the dataplane",
        "dataplane programmed from a complete snapshot",
    ],
    "config_update": ["config updated (1 keys received)"],
}
# The loop drops a kind no manager handles without a word above DEBUG.
IGNORED_LINES = ["seq={seq} {kind} ignored: no manager handles it (logged once per kind)"]
_MANAGED = {state_slice for _, state_slice in ROUTES.values() if state_slice}
_TO_KINDS = [f.name for f in pb.ToDataplane.DESCRIPTOR.oneofs_by_name["payload"].fields]


def test_every_to_dataplane_payload_kind_has_a_decided_destination() -> None:
    assert set(ROUTES) == set(_TO_KINDS)


def _message(kind: str) -> Message:
    if kind in MESSAGES:
        return MESSAGES[kind]
    envelope = pb.ToDataplane()
    getattr(envelope, kind).SetInParent()
    return payload_of(envelope)


def _slices(state: SimState) -> dict[str, object]:
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}


@pytest.mark.parametrize("kind", _TO_KINDS)
def test_every_to_dataplane_payload_reaches_its_destination(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert kind in ROUTES, f"{kind}: new payload kind; decide where it goes in ROUTES"
    destination, state_slice = ROUTES[kind]
    message = _message(kind)
    platform = SimPlatform()
    dp = Dataplane(platform)
    routed = sorted(type(m).__name__ for m in dp.managers_for(type(message)))
    assert routed == ([destination] if destination not in {"loop", "ignored", "wire"} else [])
    baseline = LEGACY_BASELINE if destination == "wire" else BASELINE

    before: list[SimState] = []
    config = dp.config

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            for setup in baseline:
                dp.send_message(setup)
            if kind != "in_sync":
                dp.send_message(pb.InSync())
            await trio.testing.wait_all_tasks_blocked()
            before.append(platform.programmed.copy())
            caplog.clear()
            dp.send_message(message)
            await trio.testing.wait_all_tasks_blocked()
            dp.close_input()

    with caplog.at_level(logging.INFO, logger="dataplane"):
        run_trio(main)
    assert dp.stats.rejected == 0
    old, new = _slices(before[0]), _slices(platform.programmed)
    changed = {name for name, value in new.items() if old[name] != value}
    if kind == "in_sync":
        assert dp.in_sync and changed == set(new)  # the first apply programs it all
    elif state_slice is None:
        assert changed == set()
    else:
        # Its own slice changes and no other manager's; a view derived from
        # it (say, an endpoint's resolved policy) may change along with it.
        assert changed & _MANAGED == {state_slice}
        config_changed = dp.config != config
        assert config_changed == (kind == "config_update")
    seq = dp.stats.messages
    lines = IGNORED_LINES if destination == "ignored" else LOOP_LINES.get(kind, [])
    expected = [line.format(seq=seq, kind=kind) for line in lines]
    expected.append(f"end of input after {seq} messages; stopping")
    assert [r.getMessage() for r in caplog.records] == expected


# --- FromDataplane: exactly these kinds are emitted ----------------------------

# Felix's WireguardStatusUpdate reports this node's WireGuard public key; the
# driver programs no WireGuard, so it never sends one.
NEVER_EMITTED = {"wireguard_status_update"}


def test_driver_emits_every_from_dataplane_kind_but_wireguard() -> None:
    kinds = {f.name for f in pb.FromDataplane.DESCRIPTOR.oneofs_by_name["payload"].fields}
    dp = Dataplane(SimPlatform())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            dp.send_message(workload("ns/a", "cali1", "10.0.0.1/32"))
            dp.send_message(pb.HostEndpointUpdate(id=_HEP_ID, endpoint=pb.HostEndpoint()))
            dp.send_message(pb.InSync())
            await trio.testing.wait_all_tasks_blocked()
            dp.send_message(pb.WorkloadEndpointRemove(id=_WEP_ID))
            dp.send_message(pb.HostEndpointRemove(id=_HEP_ID))
            dp.close_input()

    run_trio(main)
    out = dp.drain_output()
    emitted = {str(e.WhichOneof("payload")) for e in out}
    assert emitted == kinds - NEVER_EMITTED
    assert [e.sequence_number for e in out] == list(range(1, len(out) + 1))
