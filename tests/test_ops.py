"""Operations, in process: health, per-object status, records, log format, --listen."""

from __future__ import annotations

import json
import logging
import re
import urllib.request

import pytest
import trio
import trio.testing

from dataplane.core.loop import Dataplane
from dataplane.ops.address import ListenAddress, listen_address
from dataplane.ops.health import Health
from dataplane.ops.logfmt import JSONFormatter
from dataplane.ops.metrics import Metrics
from dataplane.ops.observer import Observer, object_kind
from dataplane.ops.records import records
from dataplane.ops.server import OpsServer
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.conftest import REPO

# The kernel's rule counters, exported by dataplane/ops/policy_counters.py.
POLICY_COUNTER_NAMES = ("dataplane_policy_packets", "dataplane_policy_bytes")


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# --- health --------------------------------------------------------------------------


def test_liveness_fails_only_when_busy_past_the_deadline() -> None:
    clock = _Clock()
    health = Health(liveness_deadline=60, clock=clock)
    assert health.liveness().status == 200
    clock.now += 1000  # idle for ever is healthy
    assert health.liveness().status == 200
    health.busy("apply")
    clock.now += 60
    assert health.liveness().status == 200
    clock.now += 0.5
    report = health.liveness()
    assert report.to_json() == {
        "status": "fail",
        "checks": [
            {
                "name": "main-loop",
                "ok": False,
                "detail": "busy apply for 60.5s, over the liveness deadline of 60s",
            }
        ],
    }
    health.idle()
    assert health.liveness().status == 200


def test_readiness_names_each_reason() -> None:
    clock = _Clock()
    health = Health(quarantine_grace=5, clock=clock)

    def failing() -> list[tuple[str, str]]:
        return [(c.name, c.detail) for c in health.readiness().checks if not c.ok]

    assert failing() == [("in-sync", "waiting for InSync from the calculation graph")]
    health.in_sync_received()
    health.applied("iptables-restore: exit 1", {})
    assert failing() == [
        ("in-sync", "InSync received; the first apply has not succeeded"),
        ("last-apply", "failed, retrying: iptables-restore: exit 1"),
    ]
    health.applied(None, {("policy", "p1"): "refused"})
    assert failing() == []  # within the grace period
    clock.now += 5
    health.applied(None, {("policy", "p1"): "refused", ("ipset", "s"): "bad"})
    assert failing() == [("quarantine", "policy p1 refused: refused")]
    clock.now += 5
    assert failing() == [("quarantine", "ipset s refused: bad (and 1 more)")]
    health.applied(None, {})
    assert health.readiness().status == 200


# --- per-object status through the loop ---------------------------------------------------


def _policy(name: str) -> pb.ActivePolicyUpdate:
    return pb.ActivePolicyUpdate(id=pb.PolicyID(name=name), policy=pb.Policy(tier="default"))


def _status(observer: Observer) -> dict[tuple[str, str], tuple[str, str | None]]:
    return {k: (r.status, r.error) for k, r in observer.snapshot().records.items()}


def test_objects_go_pending_done_error_and_back() -> None:
    platform = SimPlatform()
    wall = _Clock()
    observer = Observer(platform, metrics=Metrics(process=False), wall_clock=wall)
    dp = Dataplane(observer.platform, observer=observer)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            dp.send_message(_policy("a"))
            dp.send_message(pb.InSync())
            await trio.testing.wait_all_tasks_blocked()
            assert _status(observer) == {("policy", "a"): ("done", None)}

            platform.fail_applies = 1
            dp.send_message(_policy("b"))
            await trio.testing.wait_all_tasks_blocked()
            assert _status(observer) == {
                ("policy", "a"): ("done", None),
                ("policy", "b"): ("error", "sim: injected apply failure"),
            }
            assert not observer.health.readiness().ok

            platform.refuse_objects[("policy", "c")] = "chain refused"
            wall.now += 7
            dp.send_message(_policy("c"))
            await trio.sleep(2)  # the loop's retry backoff, on the mock clock
            await trio.testing.wait_all_tasks_blocked()
            snap = observer.snapshot()
            assert _status(observer) == {
                ("policy", "a"): ("done", None),
                ("policy", "b"): ("done", None),
                ("policy", "c"): ("error", "chain refused"),
            }
            assert snap.records[("policy", "c")].since == 107.0
            readiness = observer.health.readiness()
            assert [c.detail for c in readiness.checks if not c.ok] == [
                "policy c refused: chain refused"
            ]

            del platform.refuse_objects[("policy", "c")]
            dp.send_message(_policy("d"))
            await trio.testing.wait_all_tasks_blocked()
            assert {s for s, _ in _status(observer).values()} == {"done"}
            assert observer.health.readiness().ok
            dp.close_input()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_records_carry_the_base_fields_and_detail() -> None:
    observer = Observer(SimPlatform(), metrics=Metrics(process=False), wall_clock=lambda: 0.0)
    dp = Dataplane(observer.platform, observer=observer)
    dp.send_message(pb.IPSetUpdate(id="s1", members=["10.0.0.1", "10.0.0.2"]))
    dp.send_message(pb.InSync())
    dp.send_message(pb.IPSetDeltaUpdate(id="s1", added_members=["10.0.0.3"]))
    dp.close_input()
    trio.run(dp.run)
    assert records(observer.snapshot()) == [
        {
            "kind": "ipset",
            "id": "s1",
            "status": "done",
            "since": "1970-01-01T00:00:00.000Z",
            "error": None,
            "type": "ip",
            "size": 3,
        }
    ]


def test_object_kinds_of_payloads() -> None:
    assert object_kind("workload_endpoint_update") == "workload_endpoint"
    assert object_kind("ipset_delta_update") == "ipset"
    assert object_kind("service_backends_update") == "service"
    assert object_kind("wireguard_endpoint_update") == "wireguard_endpoint"


# --- log format, --listen ------------------------------------------------------------


def test_json_log_lines_carry_the_text_lines_fields() -> None:
    record = logging.LogRecord(
        "dataplane.core.loop",
        logging.ERROR,
        __file__,
        1,
        "seq=%d %s rejected: %s",
        (3, "IPSetUpdate", "field members[1]='10.0.0.999': not an IP address"),
        None,
    )
    line = json.loads(JSONFormatter().format(record))
    assert line.pop("time").endswith("+00:00")
    assert line == {
        "level": "ERROR",
        "logger": "dataplane.core.loop",
        "message": "seq=3 IPSetUpdate rejected: field members[1]='10.0.0.999': not an IP address",
        "seq": 3,
        "type": "IPSetUpdate",
    }


@pytest.mark.parametrize(
    ("text", "address"),
    [
        (":9095", ListenAddress("127.0.0.1", 9095)),
        ("0.0.0.0:9095", ListenAddress("0.0.0.0", 9095)),
        ("[::1]:9095", ListenAddress("::1", 9095)),
        ("10.0.0.1:0", ListenAddress("10.0.0.1", 0)),
    ],
)
def test_listen_addresses(text: str, address: ListenAddress) -> None:
    assert listen_address(text) == address


@pytest.mark.parametrize("text", ["9095", "host:9095", ":99999", "1.2.3.4:", ":-1", "[::1]"])
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(ValueError):
        listen_address(text)


def test_the_metrics_page_lists_every_metric() -> None:
    """docs/metrics.md's table names exactly what the driver exports."""
    page = (REPO / "docs" / "metrics.md").read_text()
    table = page.split("<!-- metrics-table: every metric the driver exports -->", 1)[1]
    table = table.split("\n\n", 1)[0]
    listed = set(re.findall(r"^\| `([a-z_*]+)` \|", table, re.M))
    exported = set()
    for family in Metrics().registry.collect():
        suffix = "_total" if family.type == "counter" else ""
        name = family.name + suffix
        exported.add("process_*" if name.startswith("process_") else name)
    exported |= {f"{name}_total" for name in POLICY_COUNTER_NAMES}
    assert listed == exported


def test_metrics_page_is_rendered_at_most_once_per_max_age() -> None:
    """A scraper every 100 ms costs one render a second, not ten."""
    now = [0.0]
    observer = Observer(SimPlatform(), metrics=Metrics(process=False))
    server = OpsServer(observer, ListenAddress("127.0.0.1", 0), clock=lambda: now[0])
    server.start()
    try:

        def rejected() -> str:
            url = f"http://127.0.0.1:{server.port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as response:
                page: str = response.read().decode()
            return next(
                line for line in page.splitlines() if line.startswith("dataplane_messages_rejected")
            )

        observer.rejected("ipset_update")
        assert rejected().endswith(" 1.0")
        observer.rejected("ipset_update")
        now[0] = 0.9
        assert rejected().endswith(" 1.0")  # the same page
        now[0] = 1.0
        assert rejected().endswith(" 2.0")
        # An apply that ends publishes a snapshot: the next scrape sees it.
        observer.rejected("ipset_update")
        observer.platform.publish()
        assert rejected().endswith(" 3.0")
    finally:
        server.close()


@pytest.mark.parametrize(("interval", "served"), [(30.0, True), (0.0, False)])
def test_policy_counters_can_be_turned_off(interval: float, served: bool) -> None:
    from dataplane.linux.platform import LinuxPlatform  # noqa: PLC0415 - builds nothing

    observer = Observer(
        LinuxPlatform(), metrics=Metrics(process=False), policy_counters_interval=interval
    )
    names = {family.name for family in observer.metrics.registry.collect()}
    assert ("dataplane_policy_packets" in names) is served


def test_no_created_series_felix_does_not_export() -> None:
    from prometheus_client import generate_latest  # noqa: PLC0415

    metrics = Metrics(process=False)
    metrics.messages.labels("in_sync").inc()
    page = generate_latest(metrics.registry).decode()
    assert 'felix_int_dataplane_messages_total{type="in_sync"} 1.0' in page
    assert "_created" not in page


def test_the_gauges_that_walk_every_object_are_counted_for_a_scrape() -> None:
    """Objects by kind and status, and the services' backends: counted when a
    scrape renders a new snapshot, not in every apply."""
    observer = Observer(SimPlatform(), metrics=Metrics(process=False))
    dp = Dataplane(observer.platform, observer=observer)
    server = OpsServer(observer, ListenAddress("127.0.0.1", 0))
    service = pb.ServiceUpdate(
        name="web",
        namespace="prod",
        cluster_ips=["10.96.0.10"],
        ports=[pb.ServicePort(Protocol="TCP", Port=80, name="http")],
    )
    http = pb.ServiceBackendPort(name="http", protocol="TCP", port=8080)
    backends = pb.ServiceBackendsUpdate(
        name="web",
        namespace="prod",
        backends=[
            pb.ServiceBackend(addresses=[a], ports=[http]) for a in ("10.65.0.1", "10.65.0.2")
        ],
    )

    def samples() -> dict[str, str]:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            page: str = response.read().decode()
        return dict(line.rsplit(" ", 1) for line in page.splitlines() if line[:1] != "#")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            for message in (_policy("a"), service, backends, pb.InSync()):
                dp.send_message(message)
            await trio.testing.wait_all_tasks_blocked()
            dp.close_input()

    server.start()
    try:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        got = samples()
        assert got["dataplane_service_backends"] == "2.0"
        assert got['dataplane_objects{kind="policy",status="done"}'] == "1.0"
        assert got['dataplane_objects{kind="service",status="done"}'] == "1.0"
        assert got['dataplane_quarantined_objects{kind="service"}'] == "0.0"
    finally:
        server.close()


def _gc_pauses(metrics: Metrics, generation: str) -> float:
    value = metrics.registry.get_sample_value(
        "dataplane_gc_pause_seconds_count", {"generation": generation}
    )
    return value or 0.0


def test_each_garbage_collection_is_timed_once_however_many_registries_show_it() -> None:
    import gc  # noqa: PLC0415

    first, second = Metrics(), Metrics()
    gc.disable()  # no automatic collection between the two counted
    try:
        before = _gc_pauses(first, "2")
        gc.collect(2)
        gc.collect(2)
        assert _gc_pauses(first, "2") == before + 2  # once each, not once per registry
    finally:
        gc.enable()
    assert _gc_pauses(second, "2") == _gc_pauses(first, "2")
    total = first.registry.get_sample_value("dataplane_gc_pause_seconds_sum", {"generation": "2"})
    assert total is not None
    assert total > 0
    assert (
        Metrics(process=False).registry.get_sample_value(
            "dataplane_gc_pause_seconds_count", {"generation": "2"}
        )
        is None
    )
