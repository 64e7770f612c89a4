"""The loop's observer: metrics, health and the published state, in one place.

Built by the driver when an operator asks for the HTTP server (or by a
test, or ``show --log``). It wraps the platform in a
:class:`~dataplane.ops.objects.TrackedPlatform` and turns the loop's hooks
(:class:`~dataplane.core.observer.LoopObserver`) into metric updates,
health state and, after every apply, a published :class:`Snapshot` that
the HTTP thread serves without ever waiting for the loop.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence

from dataplane.core.platform import Platform
from dataplane.ops.health import Health
from dataplane.ops.metrics import Metrics
from dataplane.ops.objects import Snapshot, TrackedPlatform
from dataplane.ops.policy_counters import DEFAULT_INTERVAL

__all__ = ["Observer", "object_kind"]

# Payload kind -> the kind of object it changes (as show and the
# programming-latency histogram name them).
_OBJECT_KINDS = {
    "ipset_update": "ipset",
    "ipset_delta_update": "ipset",
    "ipset_remove": "ipset",
    "active_policy_update": "policy",
    "active_policy_remove": "policy",
    "active_profile_update": "profile",
    "active_profile_remove": "profile",
    "workload_endpoint_update": "workload_endpoint",
    "workload_endpoint_remove": "workload_endpoint",
    "host_endpoint_update": "host_endpoint",
    "host_endpoint_remove": "host_endpoint",
    "ipam_pool_update": "ip_pool",
    "ipam_pool_remove": "ip_pool",
    "service_update": "service",
    "service_remove": "service",
    "service_backends_update": "service",
    "route_update": "route",
    "route_remove": "route",
    "vtep_update": "vtep",
    "vtep_remove": "vtep",
    "host_metadata_update": "host",
    "host_metadata_remove": "host",
    "config_update": "config",
}
# Not changes of anything programmed: no programming latency.
_NOT_CHANGES = frozenset({"in_sync", "process_status_update"})


def object_kind(payload_kind: str) -> str:
    """``workload_endpoint_update`` -> ``workload_endpoint``."""
    kind = _OBJECT_KINDS.get(payload_kind)
    if kind is not None:
        return kind
    for suffix in ("_update", "_remove", "_delta"):
        payload_kind = payload_kind.removesuffix(suffix)
    return payload_kind


class Observer:
    """Metrics, health and the tracked platform of one driver.

    Args:
        platform: the platform the driver programs (wrapped here).
        metrics: where to count (a fresh registry if None).
        health: liveness/readiness state (defaults if None).
        clock: monotonic seconds, for liveness (the HTTP thread reads it).
        wall_clock: Unix time, for ``since`` and snapshots.
        policy_counters_interval: seconds between reads of the kernel's rule
            counters while scraped (Linux); 0 turns them off.
    """

    def __init__(
        self,
        platform: Platform,
        *,
        metrics: Metrics | None = None,
        health: Health | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        policy_counters_interval: float = DEFAULT_INTERVAL,
    ) -> None:
        self.metrics = metrics or Metrics()
        self.health = health or Health(clock=clock)
        self.platform = TrackedPlatform(platform, wall_clock=wall_clock)
        self._started: float | None = None  # the first message's arrival, loop time
        self._resynced = False
        # Object kinds seen so far (a frozenset, replaced whole: a scrape's
        # thread adds to it while the loop reads it).
        self._kinds: frozenset[str] = frozenset({"policy", "workload_endpoint", "ipset"})
        # Arrival times of messages not yet programmed, by object kind.
        self._arrivals: defaultdict[str, list[float]] = defaultdict(list)
        bind = getattr(platform, "bind_metrics", None)
        if bind is not None:
            bind(self.metrics)
        # The kernel's own per-rule counters, read at scrape time (Linux).
        counters = getattr(platform, "policy_counters", None)
        if counters is not None and policy_counters_interval > 0:
            self.metrics.register(counters(min_interval=policy_counters_interval))
        self.metrics.in_sync.set(0)

    def snapshot(self) -> Snapshot:
        return self.platform.snapshot()

    # --- LoopObserver -------------------------------------------------------------------

    def received(self, kinds: Sequence[str], now: float) -> None:
        if self._started is None:
            self._started = now
        self.metrics.batch_size.observe(len(kinds))
        for kind, count in Counter(kinds).items():
            self.metrics.messages.labels(kind).inc(count)
            if kind not in _NOT_CHANGES:
                self._arrivals[object_kind(kind)].extend([now] * count)

    def rejected(self, kind: str) -> None:
        self.metrics.rejected.labels(kind).inc()

    def refused_field(self, path: str, why: str) -> None:
        self.platform.refuse_field(path, why)

    def arrived(self, kind: str, now: float) -> None:
        """A change from a source beside the messages (the API): its latency counts too."""
        self._arrivals[kind].append(now)

    def busy(self, what: str) -> None:
        self.health.busy(what)

    def idle(self) -> None:
        self.health.idle()

    def in_sync_received(self) -> None:
        self.health.in_sync_received()

    def decoded(self, seconds: float) -> None:
        self.metrics.phase_duration.labels("decode").observe(seconds)

    @property
    def wants_preview(self) -> bool:
        return True

    def previewed(self, waiting: str) -> None:
        self.platform.waiting = waiting
        self._gauges(self.platform.publish())

    def applied(self, error: str | None, complete: float, program: float, now: float) -> None:
        m = self.metrics
        m.phase_duration.labels("complete").observe(complete)
        m.phase_duration.labels("program").observe(program)
        m.apply_duration.observe(complete + program)
        m.apply_time.observe(complete + program)
        if error is None:
            if not self._resynced:
                self._resynced = True
                m.initial_resync.set(now - (now if self._started is None else self._started))
            for kind, arrivals in self._arrivals.items():
                latency = m.programming_latency.labels(kind)
                for arrived in arrivals:
                    latency.observe(now - arrived)
            self._arrivals.clear()
        else:
            m.failures.inc()
        refused = self.platform.refused_objects()
        self.health.applied(error, refused)
        m.in_sync.set(1 if self._resynced and error is None else 0)
        self.platform.in_sync = self._resynced
        if not self._resynced:
            self.platform.waiting = f"the first apply failed: {error}"
        self._gauges(self.platform.publish())

    def _gauges(self, snap: Snapshot) -> None:
        """After every apply: what costs nothing to count. What walks every
        object waits for a scrape (:meth:`count_objects`): at 20,000
        services it was milliseconds of every change's apply."""
        m, state = self.metrics, snap.state
        m.active_endpoints.set(len(state.workload_endpoints) + len(state.host_endpoints))
        m.active_policies.set(len(state.policies))
        m.services.set(len(state.services))
        quarantined = Counter(kind for kind, _ in self.platform.refused_objects())
        for kind in self._kinds | set(quarantined):
            m.quarantined.labels(kind).set(quarantined[kind])

    def count_objects(self, snap: Snapshot) -> None:
        """Before a scrape renders ``snap``: the gauges that walk every object
        (any thread: the snapshot is not written again once published)."""
        m, state = self.metrics, snap.state
        m.service_backends.set(sum(len(s.backends) for s in state.services.values()))
        by_kind: Counter[tuple[str, str]] = Counter(
            (r.kind, r.status) for r in snap.records.values()
        )
        kinds = self._kinds | {kind for kind, _ in by_kind}
        for kind in kinds - self._kinds:
            m.quarantined.labels(kind)  # shown, at 0 until the loop says otherwise
        self._kinds = kinds
        for kind in kinds:
            for status in ("pending", "done", "error"):
                m.objects.labels(kind, status).set(by_kind[(kind, status)])
