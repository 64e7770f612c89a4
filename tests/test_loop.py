"""The main loop: InSync gating, batching, retries with backoff, status out.

All under trio's MockClock: backoff delays and heartbeats cost no real time.
"""

from __future__ import annotations

import itertools
import logging
import math
from datetime import UTC, datetime

import pytest
import trio
import trio.testing

from dataplane.core.backoff import Backoff
from dataplane.core.loop import Dataplane
from dataplane.model import IPSetType
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.conftest import ipset, run_trio, workload


def _kinds(envelopes: list[pb.FromDataplane]) -> list[str]:
    return [str(e.WhichOneof("payload")) for e in envelopes]


async def _settle() -> None:
    """Let every task run until all are blocked (the loop is then idle)."""
    await trio.testing.wait_all_tasks_blocked()


def test_nothing_is_applied_before_in_sync_then_one_apply() -> None:
    async def main() -> None:
        platform = SimPlatform()
        dp = Dataplane(platform)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            dp.send_message(ipset("s:a", "10.0.0.1"))
            await _settle()
            dp.send_message(workload("ns/a", "cali1", "10.0.0.1/32"))
            await _settle()
            assert platform.apply_count == 0
            assert platform.programmed.ipsets == {}
            dp.send_message(pb.InSync())
            await _settle()
            assert platform.apply_count == 1
            assert set(platform.programmed.ipsets) == {"s:a"}
            dp.close_input()
        assert "dataplane_in_sync" in _kinds(dp.drain_output())

    run_trio(main)


def test_ten_thousand_messages_after_in_sync_cause_exactly_one_apply() -> None:
    async def main() -> None:
        platform = SimPlatform()
        dp = Dataplane(platform)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            dp.send_message(pb.InSync())
            await _settle()
            assert platform.apply_count == 1
            for i in range(10_000):
                dp.send_message(ipset(f"s:{i}", f"10.{i // 256}.{i % 256}.1"))
            await _settle()
            assert platform.apply_count == 2
            assert len(platform.programmed.ipsets) == 10_000
            dp.close_input()
        assert platform.apply_count == 2

    run_trio(main)


def test_failed_apply_is_retried_with_backoff_and_keeps_pending_state() -> None:
    async def main() -> None:
        platform = SimPlatform()
        platform.fail_applies = 3
        dp = Dataplane(platform, backoff=Backoff(initial=0.05, maximum=60.0))
        attempts: list[float] = []
        real_apply = platform.apply

        async def timed_apply() -> None:
            attempts.append(trio.current_time())
            await real_apply()

        platform.apply = timed_apply  # type: ignore[method-assign]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            start = trio.current_time()
            dp.send_message(ipset("s:a", "10.0.0.1"))
            dp.send_message(pb.InSync())
            await _settle()
            assert platform.apply_count == 1 and not dp.in_sync
            # While backing off, messages keep flowing into phase 1 ...
            dp.send_message(pb.IPSetDeltaUpdate(id="s:a", added_members=["10.0.0.2"]))
            await _settle()
            assert platform.apply_count == 1  # ... without forcing an early retry.
            await trio.sleep(1.0)
            assert platform.apply_count == 4 and platform.successful_applies == 1
            assert dp.in_sync
            assert platform.programmed.ipsets["s:a"].members == {"10.0.0.1", "10.0.0.2"}
            dp.close_input()
        delays = [round(b - a, 6) for a, b in itertools.pairwise(attempts)]
        assert attempts[0] == start
        assert delays == [0.05, 0.1, 0.2]
        assert dp.stats.apply_failures == 3

    run_trio(main)


def test_backoff_is_exponential_and_capped() -> None:
    backoff = Backoff(initial=0.05, maximum=60.0)
    assert [backoff.delay(n) for n in (1, 2, 3, 4)] == [0.05, 0.1, 0.2, 0.4]
    assert backoff.delay(20) == 60.0 and backoff.delay(10_000) == 60.0


def test_invalid_message_is_rejected_with_one_line_and_state_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        platform = SimPlatform()
        dp = Dataplane(platform)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            dp.send_message(ipset("s:a", "10.0.0.1"))
            dp.send_message(pb.InSync())
            await _settle()
            dp.send_message(ipset("s:a", "10.0.0.1", "10.0.0.999"))  # seq 3
            await _settle()
            dp.close_input()
        assert platform.programmed.ipsets["s:a"].members == {"10.0.0.1"}
        assert platform.programmed.ipsets["s:a"].type is IPSetType.IP
        assert dp.stats.rejected == 1

    with caplog.at_level(logging.ERROR, logger="dataplane"):
        run_trio(main)
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert line == "seq=3 IPSetUpdate rejected: field members[1]='10.0.0.999': not an IP address"


def test_invalid_config_is_rejected_whole() -> None:
    async def main() -> None:
        dp = Dataplane(SimPlatform())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            dp.send_message(pb.ConfigUpdate(config={"ReportingIntervalSecs": "7"}))
            dp.send_message(
                pb.ConfigUpdate(config={"ReportingIntervalSecs": "9", "Ipv6Support": "perhaps"})
            )
            await _settle()
            assert dp.config.reporting_interval == 7.0
            assert dp.config.ipv6_support is True
            assert dp.stats.rejected == 1
            dp.close_input()

    run_trio(main)


def test_heartbeat_follows_reporting_interval() -> None:
    async def main() -> None:
        fixed = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        dp = Dataplane(SimPlatform(), wall_clock=lambda: fixed)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            await _settle()
            first = dp.drain_output()
            assert _kinds(first) == ["process_status_update"]
            assert first[0].process_status_update.iso_timestamp == "2026-01-02T03:04:05+00:00"
            dp.send_message(pb.ConfigUpdate(config={"ReportingIntervalSecs": "5"}))
            await _settle()
            dp.drain_output()  # the restarted heartbeat reports at once
            await trio.sleep(5.0)
            await _settle()
            later = dp.drain_output()
            assert _kinds(later) == ["process_status_update"]
            assert later[0].process_status_update.uptime == pytest.approx(5.0)
            dp.close_input()

    run_trio(main)


def test_sequence_numbers_increase_and_in_sync_is_sent_once() -> None:
    async def main() -> None:
        dp = Dataplane(SimPlatform())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            dp.send_message(pb.InSync())
            await _settle()
            dp.send_message(ipset("s:a", "10.0.0.1"))
            dp.send_message(pb.InSync())
            await _settle()
            await trio.sleep(61)
            dp.close_input()
        out = dp.drain_output()
        seqs = [e.sequence_number for e in out]
        assert seqs == list(range(1, len(out) + 1))
        assert _kinds(out).count("dataplane_in_sync") == 1
        assert _kinds(out).count("process_status_update") == 3  # t=0, 30, 60

    run_trio(main)


def test_endpoint_status_updates_and_removes() -> None:
    async def main() -> None:
        dp = Dataplane(SimPlatform(), config=None)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            await _settle()
            dp.drain_output()
            dp.send_message(workload("ns/a", "cali1", "10.0.0.1/32"))
            dp.send_message(workload("ns/b", "cali2", "10.0.0.2/32", state="inactive"))
            dp.send_message(pb.InSync())
            await _settle()
            out = [e for e in dp.drain_output() if e.HasField("workload_endpoint_status_update")]
            statuses = {
                e.workload_endpoint_status_update.id.workload_id: (
                    e.workload_endpoint_status_update.status.status
                )
                for e in out
            }
            assert statuses == {"ns/a": "up", "ns/b": "down"}
            # An unchanged endpoint is not re-reported; a removed one is.
            dp.send_message(
                pb.WorkloadEndpointRemove(
                    id=pb.WorkloadEndpointID(
                        orchestrator_id="k8s", workload_id="ns/b", endpoint_id="eth0"
                    )
                )
            )
            await _settle()
            kinds = _kinds(dp.drain_output())
            assert kinds == ["workload_endpoint_status_remove"]
            dp.close_input()

    run_trio(main)


def test_a_workload_status_carries_the_endpoint_felix_writes_its_status_file_from() -> None:
    """Felix (v3.30+) writes endpoint-status files only from updates carrying field 3."""

    def updates(dp: Dataplane) -> list[pb.WorkloadEndpointStatusUpdate]:
        return [
            e.workload_endpoint_status_update
            for e in dp.drain_output()
            if e.HasField("workload_endpoint_status_update")
        ]

    async def main() -> None:
        dp = Dataplane(SimPlatform(), config=None)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            first = workload("ns/a", "cali1", "10.0.0.1/32")
            dp.send_message(first)
            dp.send_message(pb.InSync())
            await _settle()
            (update,) = updates(dp)
            assert (update.status.status, update.endpoint) == ("up", first.endpoint)
            # Same status, new data: reported again, or the file goes stale.
            moved = workload("ns/a", "cali1", "10.0.0.9/32")
            dp.send_message(moved)
            await _settle()
            (update,) = updates(dp)
            assert update.endpoint == moved.endpoint
            # A rejected update changes nothing programmed, so nothing reported.
            dp.send_message(workload("ns/a", "cali1", "10.0.0.999/32"))
            await _settle()
            assert updates(dp) == []
            assert dp.stats.rejected == 1
            dp.close_input()

    run_trio(main)


def test_registered_manager_sees_messages_and_applies() -> None:
    class Counter:
        def __init__(self) -> None:
            self.seen: list[str] = []
            self.completed = 0

        def on_update(self, msg: object) -> None:
            self.seen.append(type(msg).__name__)

        def complete_deferred_work(self) -> None:
            self.completed += 1

    async def main() -> None:
        dp = Dataplane(SimPlatform())
        counter = Counter()
        dp.register_manager(counter)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            dp.send_message(pb.NamespaceUpdate(id=pb.NamespaceID(name="ns")))
            dp.send_message(pb.InSync())
            dp.close_input()
        assert counter.seen == ["NamespaceUpdate", "InSync"]
        assert counter.completed == 1

    run_trio(main)


def test_a_kind_no_manager_handles_is_said_once_until_one_is_registered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Felix sends some kinds by the thousand: what nobody acts on is one
    line, not one per message; a manager registered later is routed to."""

    class Counter:
        handles = (pb.NamespaceUpdate,)

        def __init__(self) -> None:
            self.seen = 0

        def on_update(self, msg: object) -> None:
            self.seen += 1

        def complete_deferred_work(self) -> None:
            pass

    counter = Counter()

    async def main() -> None:
        dp = Dataplane(SimPlatform())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            for name in ("a", "b", "c"):
                dp.send_message(pb.NamespaceUpdate(id=pb.NamespaceID(name=name)))
            dp.send_message(pb.InSync())
            await _settle()
            dp.register_manager(counter)
            dp.send_message(pb.NamespaceUpdate(id=pb.NamespaceID(name="d")))
            await _settle()
            dp.close_input()

    with caplog.at_level(logging.INFO, logger="dataplane"):
        run_trio(main)
    said = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert said == ["seq=1 namespace_update ignored: no manager handles it (logged once per kind)"]
    assert counter.seen == 1


def test_end_of_input_flushes_pending_work() -> None:
    async def main() -> None:
        platform = SimPlatform()
        dp = Dataplane(platform)
        dp.send_message(pb.InSync())
        dp.send_message(ipset("s:late", "10.0.0.1"))
        dp.close_input()
        await dp.run()
        assert "s:late" in platform.programmed.ipsets

    run_trio(main)


def test_a_due_platform_timer_does_not_starve_queued_input() -> None:
    """With a refresh always due, the receive is cancelled at once; what is
    already queued must still go into the very next apply."""

    class Busy(SimPlatform):
        def wants_apply_at(self) -> float:
            return -math.inf

    async def main() -> None:
        platform = Busy()
        dp = Dataplane(platform)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            dp.send_message(pb.InSync())
            # The loop never blocks here (always due), so the mock clock never
            # moves: step the scheduler instead of sleeping.
            while not dp.in_sync:
                await trio.lowlevel.checkpoint()
            applies = platform.apply_count
            dp.send_message(ipset("s:late", "10.0.0.1"))
            while "s:late" not in platform.programmed.ipsets:
                assert platform.apply_count <= applies + 1, "queued input skipped by an apply"
                await trio.lowlevel.checkpoint()
            dp.close_input()
            nursery.cancel_scope.cancel()

    run_trio(main)


def test_a_source_s_news_during_an_apply_is_applied_without_more_input() -> None:
    """A source (the Kubernetes API) says it changed while an apply runs:
    the loop is not waiting then, so its wake-up finds nothing to cancel.
    The next wait must see the work owed and apply at once, not when the
    next message or timer comes (a refresh interval, or never)."""

    class Gated(SimPlatform):
        def __init__(self) -> None:
            super().__init__()
            self.entered = trio.Event()
            self.release = trio.Event()

        async def apply(self) -> None:
            self.entered.set()
            await self.release.wait()
            await super().apply()

    async def main() -> None:
        platform = Gated()
        dp = Dataplane(platform)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            dp.send_message(pb.InSync())
            await platform.entered.wait()
            dp.changed()  # as a source's task does, between the apply's awaits
            platform.release.set()
            await _settle()
            assert platform.apply_count == 2
            dp.close_input()

    run_trio(main)
