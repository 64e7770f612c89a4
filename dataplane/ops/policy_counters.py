"""Per policy rule packet and byte counters, from the kernel's own rule counters.

Which rule drops this traffic? The kernel counts every iptables rule it
runs; this collector reads those counters (``iptables-save -c`` of the
filter table, IPv4 and IPv6, with whichever backend the platform uses) and
exports them by the policy rule they were rendered from::

    dataplane_policy_packets_total{tier,policy,direction,rule,action}
    dataplane_policy_bytes_total{tier,policy,direction,rule,action}

``rule`` is the rule's index in the policy's inbound or outbound rules as
Felix sent them (``direction``), or ``end-of-tier`` for the drop that ends a
tier; profiles are the tier ``__PROFILE__`` (see
:mod:`dataplane.linux.render.rule_labels`). Counters of the iptables rules
rendered from one policy rule, and of IPv4 and IPv6, are summed.

Threads: :meth:`PolicyCounters.collect` runs in the metrics server's
thread, never on the main loop. The main loop publishes the label map
(:data:`~dataplane.linux.render.rule_labels.RuleMap`, immutable, replaced whole
after each apply) and this reads whichever map is current. The save (a
subprocess with a timeout) and its parsing run at most once per
``min_interval``, and only while someone scrapes; in the driver they run
in a thread of their own (``refresh_with``), so a scrape is served the
last counters read at once and never waits seconds for the save of a big
node's filter table (measured: up to 8.7 s at 5,000 endpoints, when the
save ran inside the scrape). ``collect`` never raises: a failed save counts
in ``felix_iptables_save_errors`` and the last good counters are exported
again (nothing new).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from dataplane.errors import ProgrammingError
from dataplane.linux.iptables.chains import parse_counters
from dataplane.linux.render.rule_labels import RuleMap
from dataplane.linux.rules.rule import Origin
from dataplane.ops.metrics import Metrics

__all__ = [
    "DEFAULT_INTERVAL",
    "LABELS",
    "PolicyCounters",
    "RuleCounts",
    "count_rules",
    "in_thread",
]

log = logging.getLogger(__name__)

LABELS = ("tier", "policy", "direction", "rule", "action")
# Kernel counters are for finding the rule that drops traffic, not for
# per-second rates: fresh enough every 30 s, and a big node's save is
# seconds of CPU on a 2-core machine (see the module docstring).
DEFAULT_INTERVAL = 30.0


@dataclass(frozen=True, slots=True)
class RuleCounts:
    packets: int
    bytes: int


# Counted rules in a save: (chain, rule hash, packets, bytes).
Parse = Callable[[str], Iterable[tuple[str, str, int, int]]]


def count_rules(
    rules: RuleMap, saves: dict[int, str], parse: Parse = parse_counters
) -> dict[Origin, RuleCounts]:
    """Counters of each labelled rule in ``saves`` (by IP version: ``iptables-save
    -c`` text, or what ``parse`` reads), summed per label."""
    totals: dict[Origin, tuple[int, int]] = {}
    for version, text in saves.items():
        for chain, rule_hash, packets, octets in parse(text):
            labels = rules.get((version, chain))
            label = labels.get(rule_hash) if labels is not None else None
            if label is not None:
                p, b = totals.get(label, (0, 0))
                totals[label] = (p + packets, b + octets)
    return {label: RuleCounts(p, b) for label, (p, b) in totals.items()}


class PolicyCounters(Collector):
    """A prometheus-client collector of the policy rule counters.

    Args:
        rules: the current label map (the main loop replaces it whole).
        save: ``iptables-save -c -t filter`` output for an IP version (or
            on nftables ``nft list table``); raises
            :class:`ProgrammingError` when the save fails.
        parse: reads counted rules out of a save (default: iptables').
        metrics: where save calls and failures are counted, if anywhere.
        min_interval: seconds a save's result is served for.
        clock: monotonic seconds.
        refresh_with: runs a refresh (default: at once, in the scrape; the
            driver passes a background thread so scrapes never wait).
        busy: True while the dataplane is being programmed: a refresh then
            waits for a later scrape, so that a big save never competes
            with a restore for the CPU and the kernel (a 5,000-endpoint
            burst was up to 30 % slower with saves during its apply).
    """

    def __init__(
        self,
        rules: Callable[[], RuleMap],
        save: Callable[[int], str],
        *,
        metrics: Metrics | None = None,
        min_interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        refresh_with: Callable[[Callable[[], None]], None] = lambda refresh: refresh(),
        busy: Callable[[], bool] = lambda: False,
        parse: Parse = parse_counters,
    ) -> None:
        self._rules = rules
        self._save = save
        self._parse = parse
        self._metrics = metrics
        self._min_interval = min_interval
        self._clock = clock
        self._refresh_with = refresh_with
        self._busy = busy
        self._lock = threading.Lock()  # scrapes may come in parallel
        self._refreshing = False
        self._next = -float("inf")
        self._counts: dict[Origin, RuleCounts] = {}

    def describe(self) -> Iterator[Metric]:
        # The names only: registering must not run a save.
        yield from self._families({})

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            now = self._clock()
            due = now >= self._next and not self._refreshing and not self._busy()
            if due:
                self._next = now + self._min_interval
                self._refreshing = True
        if due:
            self._refresh_with(self._refresh_once)
        with self._lock:
            counts = self._counts
        yield from self._families(counts)

    def _refresh_once(self) -> None:
        try:
            self._refresh()
        finally:
            with self._lock:
                self._refreshing = False

    def _refresh(self) -> None:
        rules = self._rules()
        saves: dict[int, str] = {}
        try:
            for version in sorted({version for version, _ in rules}):
                if self._metrics is not None:
                    self._metrics.save_calls.inc()
                saves[version] = self._save(version)
            counts = count_rules(rules, saves, self._parse)
            with self._lock:
                self._counts = counts
        except ProgrammingError as exc:
            if self._metrics is not None:
                self._metrics.save_errors.inc()
            log.warning("policy counters: %s; the last counters read are served", exc)
        except Exception:
            # A scrape must never fail for this: every other metric is on the
            # same page. Logged in full, as the bug it is.
            log.exception("policy counters: reading the rule counters failed")

    @staticmethod
    def _families(counts: dict[Origin, RuleCounts]) -> Iterator[Metric]:
        packets = CounterMetricFamily(
            "dataplane_policy_packets",
            "Packets that matched each policy rule (the kernel's rule counters).",
            labels=LABELS,
        )
        octets = CounterMetricFamily(
            "dataplane_policy_bytes",
            "Bytes of the packets that matched each policy rule.",
            labels=LABELS,
        )
        for label, count in sorted(counts.items()):
            values = [label.tier, label.policy, label.direction, label.rule, label.action]
            packets.add_metric(values, count.packets)
            octets.add_metric(values, count.bytes)
        yield packets
        yield octets


def in_thread(refresh: Callable[[], None]) -> None:
    """Run ``refresh`` in a daemon thread of its own (a save may take seconds)."""
    threading.Thread(target=refresh, name="dataplane-policy-counters", daemon=True).start()
