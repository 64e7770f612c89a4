"""The Windows platform on a simulated host, driven by the real loop and managers.

Under trio's MockClock: refresh timers and retry backoff cost no real time,
and HCN calls run inline so a settled loop has finished every call.
"""

from __future__ import annotations

import logging
import random
from collections import Counter

import pytest
import trio
import trio.testing

from dataplane.model import EndpointStatus
from dataplane.windows.hns.hcn import HnsVersion
from dataplane.windows.sim.simhost import SimHost
from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.hns import add_pod, calico_host
from testbed.node import PodSpec
from tests.conftest import run_trio
from tests.kernel import scenario as sc
from tests.windows.windows_node import Model, disagreements, messages, node, send

OLD, NEW = HnsVersion(12, 0), HnsVersion(15, 4)


def modified(before: Counter[str], host: SimHost) -> int:
    return host.calls["ModifyEndpoint"] - before["ModifyEndpoint"]


@pytest.mark.parametrize("version", [OLD, NEW], ids=str)
def test_policy_matrix_verdicts_on_an_old_and_a_new_host(version: HnsVersion) -> None:
    msgs = messages()
    host = calico_host(sc.PODS, version)

    async def main() -> None:
        async with node(host) as (dp, platform):
            await send(dp, *msgs)
            assert "fails closed: 1 rule(s)" in platform.dump()
            assert set(platform.endpoint_statuses().values()) == {EndpointStatus.UP}

    run_trio(main)
    assert disagreements(host.snapshot(), Model.of(msgs)) == [], version
    # One listing, one ModifyEndpoint per pod, sets only where HNS has them.
    assert host.calls["EnumerateEndpoints"] == 1
    assert host.calls["ModifyEndpoint"] == len(sc.PODS)
    assert host.calls["ModifyNetwork"] == (0 if version == OLD else 1)


def test_a_policy_update_writes_only_the_endpoints_whose_acls_change() -> None:
    host = calico_host(sc.PODS)
    msgs = messages()
    changed = pb.ActivePolicyUpdate(
        id=sc.API_TO_DB,
        policy=pb.Policy(
            tier="default",
            namespace="backend",
            inbound_rules=[
                pb.Rule(
                    action="allow", protocol=sc.TCP, dst_ports=[pb.PortRange(first=5433, last=5433)]
                )
            ],
        ),
    )

    async def main() -> None:
        async with node(host) as (dp, _):
            await send(dp, *msgs)
            before = Counter(host.calls)
            await send(dp, changed)
            assert modified(before, host) == 1  # db-1 alone uses the policy
            before = Counter(host.calls)
            await send(dp, changed)  # the same again: nothing to write
            assert modified(before, host) == 0

    run_trio(main)
    assert disagreements(host.snapshot(), Model.of([*msgs, changed])) == []


@pytest.mark.parametrize(("version", "endpoint_calls", "network_calls"), [(OLD, 2, 0), (NEW, 0, 1)])
def test_a_set_member_change_touches_only_what_uses_the_set(
    version: HnsVersion, endpoint_calls: int, network_calls: int
) -> None:
    """s:web is used by the api pods' ingress only: expanded, 2 endpoints; as a SetPolicy, none.

    (s:mon would touch every pod: the security tier's negation of it is on
    everyone's ingress, and a negation is always expanded.)
    """
    host = calico_host(sc.PODS, version)
    msgs = messages()
    delta = pb.IPSetDeltaUpdate(id=sc.SET_WEB, added_members=["10.65.0.13"])

    async def main() -> None:
        async with node(host) as (dp, _):
            await send(dp, *msgs)
            before = Counter(host.calls)
            await send(dp, delta)
            assert modified(before, host) == endpoint_calls
            assert host.calls["ModifyNetwork"] - before["ModifyNetwork"] == network_calls

    run_trio(main)


def test_random_faults_converge_once_they_stop() -> None:
    rng = random.Random(7)
    faulty = True
    host = calico_host(sc.PODS)
    host.fault = lambda call, target: faulty and rng.random() < 0.4
    msgs = messages()

    async def main() -> None:
        nonlocal faulty
        async with node(host) as (dp, platform):
            await send(dp, *msgs)
            # A failed read fails the apply; a failed write is quarantined.
            assert dp.last_apply_error is not None or platform.quarantined()
            faulty = False
            await trio.sleep(60)  # the loop's backoff retries
            assert dp.last_apply_error is None
            assert set(platform.endpoint_statuses().values()) == {EndpointStatus.UP}

    run_trio(main)
    assert disagreements(host.snapshot(), Model.of(msgs)) == []


def test_endpoints_deleted_or_late_are_picked_up() -> None:
    host = calico_host([p for p in sc.PODS if p.name != "db-1"])
    msgs = messages()
    db = sc.pod("db-1")

    async def main() -> None:
        async with node(host) as (dp, platform):
            await send(dp, *msgs)
            statuses = platform.endpoint_statuses()
            down = [str(k) for k, s in statuses.items() if s is EndpointStatus.DOWN]
            assert down == [f"k8s/{db.workload_id}/eth0"]
            add_pod(host, db)  # the CNI gets to it
            await trio.sleep(5)
            assert set(platform.endpoint_statuses().values()) == {EndpointStatus.UP}
            # Someone deletes api-1's endpoint and the CNI recreates it bare.
            api = sc.pod("api-1")
            (gone,) = [e for e in host.endpoints.values() if e["Name"].endswith("api-1_eth0")]
            host.delete_endpoint(gone["ID"])
            add_pod(host, api)
            await trio.sleep(100)  # EndpointRefreshInterval (90 s) re-reads HNS
            assert set(platform.endpoint_statuses().values()) == {EndpointStatus.UP}

    run_trio(main)
    assert disagreements(host.snapshot(), Model.of(msgs)) == []


def test_acls_changed_behind_our_back_are_repaired_at_refresh() -> None:
    host = calico_host(sc.PODS)
    msgs = messages()

    async def main() -> None:
        async with node(host) as (dp, _):
            await send(dp, *msgs)
            for endpoint in host.endpoints.values():
                endpoint["Policies"] = []  # wiped: every pod open
            before = Counter(host.calls)
            await trio.sleep(100)
            assert modified(before, host) == len(sc.PODS)

    run_trio(main)
    assert disagreements(host.snapshot(), Model.of(msgs)) == []


def test_bad_input_is_one_line_and_changes_nothing_programmed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host = calico_host(sc.PODS)
    msgs = messages()
    bad = pb.ActivePolicyUpdate(
        id=sc.API_TO_DB,
        policy=pb.Policy(
            tier="default", inbound_rules=[pb.Rule(action="allow", src_net=["10.0.0.300/8"])]
        ),
    )

    async def main() -> None:
        async with node(host) as (dp, _):
            await send(dp, *msgs)
            programmed = host.snapshot()["Endpoints"]
            await send(dp, bad)
            assert host.snapshot()["Endpoints"] == programmed
            assert dp.stats.rejected == 1

    with caplog.at_level(logging.ERROR, logger="dataplane"):
        run_trio(main)
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert line.startswith(f"seq={len(msgs) + 1} ActivePolicyUpdate rejected: field ")
    assert "10.0.0.300/8" in line
    assert disagreements(host.snapshot(), Model.of(msgs)) == []


def _qos_of(host: SimHost, pod: str) -> list[object]:
    (endpoint,) = [e for e in host.endpoints.values() if e["Name"].endswith(f"_{pod}_eth0")]
    return [p for p in endpoint.get("Policies") or () if p.get("Type") == "QOS"]


def _cap(bytes_per_second: int) -> list[object]:
    return [{"Type": "QOS", "Settings": {"MaximumOutgoingBandwidthInBytes": bytes_per_second}}]


def test_an_egress_bandwidth_limit_is_the_endpoints_qos_policy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # HNS caps what an endpoint sends (its QOS policy); the rest of a pod's
    # QoS controls has no HNS form, said once. The ACLs stay as they were.
    host = calico_host(sc.PODS)
    msgs = messages()
    web, api = sc.pod("web-1"), sc.pod("api-1")

    def limited(spec: PodSpec, **controls: int) -> pb.WorkloadEndpointUpdate:
        update = sc.endpoint(spec, spec.iface)
        update.endpoint.qos_controls.CopyFrom(pb.QoSControls(**controls))
        return update

    async def main() -> None:
        async with node(host) as (dp, _):
            await send(dp, *msgs)
            programmed = {i: e.get("Policies", []) for i, e in host.endpoints.items()}
            await send(dp, limited(web, EgressBandwidth=10_000_000))
            marked = limited(api, IngressBandwidth=10_000_000, EgressPacketRate=5)
            marked.endpoint.qos_policies.add(dscp=46)
            await send(dp, marked)
            assert _qos_of(host, "web-1") == _cap(1_250_000)
            assert _qos_of(host, "api-1") == []
            acls = {
                i: [p for p in e.get("Policies", []) if p["Type"] != "QOS"]
                for i, e in host.endpoints.items()
            }
            assert acls == programmed
            # Changed, tampered with (repaired at the endpoint refresh), removed.
            await send(dp, limited(web, EgressBandwidth=20_000_000))
            assert _qos_of(host, "web-1") == _cap(2_500_000)
            (endpoint,) = [e for e in host.endpoints.values() if e["Name"].endswith("_web-1_eth0")]
            endpoint["Policies"] = [p for p in endpoint["Policies"] if p["Type"] != "QOS"]
            await trio.sleep(100)  # EndpointRefreshInterval (90 s) re-reads HNS
            assert _qos_of(host, "web-1") == _cap(2_500_000)
            await send(dp, sc.endpoint(web, web.iface))
            assert _qos_of(host, "web-1") == []

    with caplog.at_level(logging.WARNING, logger="dataplane"):
        run_trio(main)
    said = [
        r.getMessage()
        for r in caplog.records
        if "QoS" in r.getMessage() or "DSCP" in r.getMessage()
    ]
    assert said == [
        "DSCP marking (qos_policies; HNS has no form for it): not programmed on Windows"
        " (Felix has no Windows form either)",
        "QoS controls other than the egress bandwidth (ingress bandwidth, packet rates,"
        " connection limits; HNS has no form for them): not programmed on Windows"
        " (Felix has no Windows form either)",
    ]
    assert disagreements(host.snapshot(), Model.of(msgs)) == []
