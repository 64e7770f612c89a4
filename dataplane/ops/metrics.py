"""The driver's Prometheus metrics: Felix's names where the meaning is Felix's.

Felix serves no dataplane metrics for an external driver, so the driver
serves its own, named so that dashboards built on Felix's work unchanged:
``felix_int_dataplane_*`` for the loop, ``felix_iptables_*`` and
``felix_ipset_*`` for the kernel tools, ``felix_active_local_*`` for what
the node holds. Felix's durations are summaries (whose quantiles cannot be
aggregated across nodes, and which prometheus-client exposes as ``_count``
and ``_sum`` only); the same durations are also histograms under
``dataplane_``, with what Felix lacks: programming latency by object kind
(kube-proxy's ``network_programming_duration_seconds``), quarantine,
services, route and sysctl writes, HNS calls.

One :class:`Metrics` per driver, each with its own registry: a process may
run several drivers (tests do), and their counters must not mix. Every
metric object is prometheus-client's, hence safe to update from the main
loop while the HTTP thread scrapes.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    Summary,
    disable_created_metrics,
)
from prometheus_client.registry import Collector

from dataplane.ops.gc_pauses import GcPauses

__all__ = ["LATENCY_BUCKETS", "Metrics"]

# Seconds: from a single-chain change on an idle node (~5 ms) to a
# 10,000-endpoint first sync (tens of seconds).
LATENCY_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)
# One HNS or kernel-tool call: a millisecond to a stuck-looking 10 s.
CALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


# Felix (Go's client) exports no ``*_created`` series; prometheus-client adds
# one per counter, histogram and summary unless told not to (process-wide).
disable_created_metrics()  # type: ignore[no-untyped-call]  # the library leaves it untyped


class Metrics:
    """Every metric the driver exports, registered in :attr:`registry`."""

    def __init__(self, *, process: bool = True) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # --- Felix's names: the loop -------------------------------------------
        self.apply_time = Summary(
            "felix_int_dataplane_apply_time_seconds",
            "Time in seconds for each incremental update to the dataplane.",
            registry=r,
        )
        self.failures = Counter(
            "felix_int_dataplane_failures",
            "Number of times dataplane updates failed and will be retried.",
            registry=r,
        )
        self.messages = Counter(
            "felix_int_dataplane_messages",
            "Number dataplane messages by type.",
            ["type"],
            registry=r,
        )
        self.batch_size = Summary(
            "felix_int_dataplane_msg_batch_size",
            "Number of messages processed in each batch.",
            registry=r,
        )
        self.initial_resync = Gauge(
            "felix_int_dataplane_initial_resync_time_seconds",
            "Time in seconds that it took to do the initial resync with the dataplane"
            " (the first message received to the first successful apply).",
            registry=r,
        )
        # --- Felix's names: kernel tools (Linux) -------------------------------
        self.restore_calls = Counter(
            "felix_iptables_restore_calls", "Number of iptables-restore calls.", registry=r
        )
        self.restore_errors = Counter(
            "felix_iptables_restore_errors", "Number of iptables-restore errors.", registry=r
        )
        self.save_calls = Counter(
            "felix_iptables_save_calls", "Number of iptables-save calls.", registry=r
        )
        self.save_errors = Counter(
            "felix_iptables_save_errors", "Number of iptables-save errors.", registry=r
        )
        self.lines_executed = Counter(
            "felix_iptables_lines_executed",
            "Number of iptables rule updates executed.",
            ["ip_version", "table"],
            registry=r,
        )
        self.chains = Gauge(
            "felix_iptables_chains",
            "Number of active iptables chains.",
            ["ip_version", "table"],
            registry=r,
        )
        self.rules = Gauge(
            "felix_iptables_rules",
            "Number of active iptables rules.",
            ["ip_version", "table"],
            registry=r,
        )
        self.ipset_calls = Counter(
            "felix_ipset_calls", "Number of ipset commands executed.", registry=r
        )
        self.ipset_errors = Counter(
            "felix_ipset_errors", "Number of ipset command failures.", registry=r
        )
        self.ipset_lines = Counter(
            "felix_ipset_lines_executed", "Number of ipset operations executed.", registry=r
        )
        self.ipsets_calico = Gauge(
            "felix_ipsets_calico",
            "Number of active Calico IP sets.",
            ["ip_version"],
            registry=r,
        )
        # --- Felix's names: what the node holds --------------------------------
        self.active_endpoints = Gauge(
            "felix_active_local_endpoints", "Number of active endpoints on this host.", registry=r
        )
        self.active_policies = Gauge(
            "felix_active_local_policies", "Number of active policies on this host.", registry=r
        )
        # --- dataplane_: what Felix lacks --------------------------------------
        self.apply_duration = Histogram(
            "dataplane_apply_duration_seconds",
            "Duration of each apply (phase 2: managers' deferred work and the writes).",
            registry=r,
            buckets=LATENCY_BUCKETS,
        )
        self.phase_duration = Histogram(
            "dataplane_phase_duration_seconds",
            "Duration of each loop phase: decode (phase 1, in memory), complete (the"
            " managers' deferred work), program (the platform's writes).",
            ["phase"],
            registry=r,
            buckets=LATENCY_BUCKETS,
        )
        self.programming_latency = Histogram(
            "dataplane_network_programming_duration_seconds",
            "From receipt of a message to its change programmed, by object kind.",
            ["kind"],
            registry=r,
            buckets=LATENCY_BUCKETS,
        )
        self.rejected = Counter(
            "dataplane_messages_rejected",
            "Messages rejected whole for an invalid field, by type.",
            ["type"],
            registry=r,
        )
        self.quarantined = Gauge(
            "dataplane_quarantined_objects",
            "Objects the dataplane refused, held back and retried alone, by kind.",
            ["kind"],
            registry=r,
        )
        self.objects = Gauge(
            "dataplane_objects",
            "Desired objects by kind and reconciliation status (pending, done, error).",
            ["kind", "status"],
            registry=r,
        )
        self.services = Gauge(
            "dataplane_services", "Services programmed (one per namespace/name).", registry=r
        )
        self.service_backends = Gauge(
            "dataplane_service_backends",
            "Service backends programmed (endpoints behind every service port).",
            registry=r,
        )
        self.route_writes = Counter(
            "dataplane_route_writes",
            "Routes, neighbours and links written through netlink.",
            registry=r,
        )
        self.sysctl_writes = Counter(
            "dataplane_sysctl_writes", "Interface and forwarding sysctls written.", registry=r
        )
        self.hns_calls = Counter(
            "dataplane_hns_calls",
            "HNS (computenetwork.dll) calls, by function.",
            ["function"],
            registry=r,
        )
        self.hns_errors = Counter(
            "dataplane_hns_call_errors",
            "HNS calls that failed, by function.",
            ["function"],
            registry=r,
        )
        self.hns_latency = Histogram(
            "dataplane_hns_call_duration_seconds",
            "Duration of each HNS call, by function.",
            ["function"],
            registry=r,
            buckets=CALL_BUCKETS,
        )
        self.in_sync = Gauge(
            "dataplane_in_sync",
            "1 once the dataplane is programmed from a complete snapshot (DataplaneInSync"
            " sent) and the last apply succeeded, else 0.",
            registry=r,
        )
        if process:
            # CPU, memory, open fds, start time: process_* as every exporter;
            # and how long each garbage collection held the process.
            ProcessCollector(registry=r)
            r.register(GcPauses())

    def register(self, collector: Collector) -> None:
        """Add a collector evaluated at scrape time (e.g. the policy counters)."""
        self.registry.register(collector)
