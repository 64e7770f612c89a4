"""Operating the Kubernetes API source: its readiness check and its metrics.

* ``/readyz`` gets a ``kubernetes-api`` check: not ready until the first
  lists of Services, EndpointSlices and this Node are complete, nor while
  any of them has failed to list or watch for longer than the grace period
  (then it names the resource, how long, and the last error). Within the
  grace it stays ready: the programmed services are kept meanwhile.
* ``/metrics`` gets, per resource, the requests made to the API server,
  complete lists, lists after a 410, watches opened, watch events, objects
  refused, whether it has synced and how long it has been broken; the
  event-to-kernel latency is the loop's ``dataplane_programming_latency``
  with ``kind="kube_service"`` (from a change's arrival to its apply).

Both are read on the HTTP thread: they take only plain values the
reflectors replace whole.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dataplane.kube.source import KubeServices
from dataplane.ops.health import Check

__all__ = ["DEFAULT_GRACE", "KubeCollector", "kube_readiness"]

DEFAULT_GRACE = 60.0


def kube_readiness(source: KubeServices, grace: float, now: float) -> Check:
    waiting = [r.resource.name for r in source.reflectors if not r.synced]
    if waiting:
        return Check("kubernetes-api", False, f"waiting for the first list of {', '.join(waiting)}")
    broken = [
        (now - r.broken_at, r)
        for r in source.reflectors
        if r.broken_at is not None and now - r.broken_at >= grace
    ]
    if broken:
        age, worst = max(broken, key=lambda item: item[0])
        return Check(
            "kubernetes-api",
            False,
            f"{worst.resource.name}: not following the API for {age:.0f}s (grace {grace:g}s):"
            f" {worst.last_error}; programmed services are kept",
        )
    return Check(
        "kubernetes-api",
        True,
        f"following: {sum(1 for s in source.states.values() if s.service)} services",
    )


class KubeCollector(Collector):
    """The source's counters, read at scrape time."""

    def __init__(self, source: KubeServices) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        reflectors = self.source.reflectors
        requests = CounterMetricFamily(
            "dataplane_kube_requests",
            "Requests made to the Kubernetes API server (list and watch).",
        )
        requests.add_metric([], self.source.api.requests)
        yield requests
        for name, help_text, attr in (
            ("dataplane_kube_lists", "Complete lists, by resource.", "lists"),
            ("dataplane_kube_relists", "Lists after a 410 (resource version too old).", "relists"),
            ("dataplane_kube_watches", "Watches opened, by resource.", "watches"),
            ("dataplane_kube_events", "Watch events received (bookmarks too).", "events"),
            ("dataplane_kube_bad_objects", "Objects without a name or version.", "bad_objects"),
        ):
            family = CounterMetricFamily(name, help_text, labels=["resource"])
            for r in reflectors:
                family.add_metric([r.resource.name], getattr(r, attr))
            yield family
        synced = GaugeMetricFamily(
            "dataplane_kube_synced", "1 once the first list is complete.", labels=["resource"]
        )
        broken = GaugeMetricFamily(
            "dataplane_kube_broken",
            "1 while the last list or watch failed (retrying with backoff).",
            labels=["resource"],
        )
        for r in reflectors:
            synced.add_metric([r.resource.name], 1 if r.synced else 0)
            broken.add_metric([r.resource.name], 0 if r.broken_at is None else 1)
        yield synced
        yield broken
        refused = CounterMetricFamily(
            "dataplane_kube_refused_objects",
            "Services and EndpointSlices refused for a value the model cannot take.",
        )
        refused.add_metric([], self.source.refusals)
        yield refused
