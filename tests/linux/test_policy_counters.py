"""The policy counters collector: cached saves, summed labels, never a failed scrape."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

import pytest
from prometheus_client import generate_latest

from dataplane.errors import ProgrammingError
from dataplane.linux.render.rule_labels import RuleMap
from dataplane.linux.rules.rule import Origin
from dataplane.ops.metrics import Metrics
from dataplane.ops.policy_counters import PolicyCounters
from tests.linux.metric_samples import parsed, samples

DENY = Origin("security", "guard", "inbound", "0", "deny")
ALLOW = Origin("default", "NetworkPolicy:backend/web", "outbound", "2", "allow")
RULES: RuleMap = MappingProxyType(
    {
        (4, "cali-pi-guard"): {"AAAAAAAAAAAAAAAA": DENY},
        (6, "cali-pi-guard"): {"BBBBBBBBBBBBBBBB": DENY},
        (4, "cali-po-_web"): {"CCCCCCCCCCCCCCCC": ALLOW, "DDDDDDDDDDDDDDDD": ALLOW},
    }
)


def _line(chain: str, rule_hash: str, packets: int) -> str:
    return f'[{packets}:{packets * 60}] -A {chain} -m comment --comment "cali:{rule_hash}" -j DROP'


class FakeKernel:
    """The rule counters the save tool reports, per IP version; with fault switches."""

    def __init__(self) -> None:
        self.packets = {"AAAAAAAAAAAAAAAA": 3, "BBBBBBBBBBBBBBBB": 4, "CCCCCCCCCCCCCCCC": 5}
        self.packets["DDDDDDDDDDDDDDDD"] = 6
        self.fail = False  # the tool fails
        self.broken = False  # a bug

    def save(self, version: int) -> str:
        if self.fail:
            raise ProgrammingError("iptables-nft-save -c -t filter: exit 4: resource busy")
        if self.broken:
            raise ValueError("a bug")
        lines = ["*filter", ":cali-pi-guard - [0:0]"]
        for (v, chain), labels in RULES.items():
            if v == version:
                lines += [_line(chain, h, self.packets[h]) for h in labels]
        lines.append("[99:9900] -A FORWARD -j ACCEPT")  # not ours: no hash
        return "\n".join([*lines, "COMMIT", ""])


def _counters(kernel: FakeKernel, now: list[float], rules: RuleMap = RULES) -> Metrics:
    metrics = Metrics(process=False)
    collector = PolicyCounters(
        lambda: rules, kernel.save, metrics=metrics, min_interval=5.0, clock=lambda: now[0]
    )
    metrics.register(collector)
    return metrics


LABELS = ("security", "guard", "inbound", "0", "deny")
ALLOW_LABELS = ("default", "NetworkPolicy:backend/web", "outbound", "2", "allow")


def test_registering_runs_no_save_and_a_scrape_reads_both_families_summed() -> None:
    kernel, now = FakeKernel(), [100.0]
    metrics = _counters(kernel, now)
    r = metrics.registry
    assert samples(r, "felix_iptables_save_calls_total") == {(): 0.0}
    text = generate_latest(r).decode()
    names = ("tier", "policy", "direction", "rule", "action")
    assert parsed(text, "dataplane_policy_packets_total", names) == {
        LABELS: 7.0,
        ALLOW_LABELS: 11.0,
    }
    assert parsed(text, "dataplane_policy_bytes_total", names) == {
        LABELS: 420.0,
        ALLOW_LABELS: 660.0,
    }
    assert samples(r, "felix_iptables_save_calls_total") == {(): 2.0}  # v4 and v6


def test_scrapes_within_the_interval_are_served_from_the_cache() -> None:
    kernel, now = FakeKernel(), [100.0]
    metrics = _counters(kernel, now)
    r = metrics.registry
    assert samples(r, "dataplane_policy_packets_total") == {LABELS: 7.0, ALLOW_LABELS: 11.0}
    kernel.packets["AAAAAAAAAAAAAAAA"] = 30
    now[0] = 104.9
    assert samples(r, "dataplane_policy_packets_total") == {LABELS: 7.0, ALLOW_LABELS: 11.0}
    assert samples(r, "felix_iptables_save_calls_total") == {(): 2.0}
    now[0] = 105.0
    assert samples(r, "dataplane_policy_packets_total") == {LABELS: 34.0, ALLOW_LABELS: 11.0}
    assert samples(r, "felix_iptables_save_calls_total") == {(): 4.0}


def test_a_failing_save_exports_nothing_new_and_counts_an_error() -> None:
    kernel, now = FakeKernel(), [100.0]
    metrics = _counters(kernel, now)
    r = metrics.registry
    first = samples(r, "dataplane_policy_packets_total")
    kernel.packets["AAAAAAAAAAAAAAAA"] = 30
    kernel.fail = True
    now[0] = 200.0
    assert samples(r, "dataplane_policy_packets_total") == first
    assert samples(r, "felix_iptables_save_errors_total") == {(): 1.0}
    kernel.fail, kernel.broken = False, True
    now[0] = 300.0
    assert samples(r, "dataplane_policy_packets_total") == first  # a bug is logged, not raised
    kernel.broken = False
    now[0] = 400.0
    assert samples(r, "dataplane_policy_packets_total") == {LABELS: 34.0, ALLOW_LABELS: 11.0}
    assert samples(r, "felix_iptables_save_errors_total") == {(): 1.0}


def test_only_the_versions_with_labelled_rules_are_saved() -> None:
    kernel, now = FakeKernel(), [100.0]
    v4_only = MappingProxyType({k: v for k, v in RULES.items() if k[0] == 4})
    metrics = _counters(kernel, now, v4_only)
    r = metrics.registry
    assert samples(r, "dataplane_policy_packets_total") == {LABELS: 3.0, ALLOW_LABELS: 11.0}
    assert samples(r, "felix_iptables_save_calls_total") == {(): 1.0}
    empty = _counters(kernel, now, MappingProxyType({}))
    assert samples(empty.registry, "dataplane_policy_packets_total") == {}
    assert samples(empty.registry, "felix_iptables_save_calls_total") == {(): 0.0}


@pytest.mark.parametrize("interval", [0.0, 5.0])
def test_without_metrics_the_collector_still_serves(interval: float) -> None:
    kernel = FakeKernel()
    collector = PolicyCounters(lambda: RULES, kernel.save, min_interval=interval)
    (packets, octets) = list(collector.collect())
    assert {
        tuple(s.labels.values()): s.value for s in packets.samples if s.name.endswith("_total")
    } == {
        LABELS: 7.0,
        ALLOW_LABELS: 11.0,
    }
    assert octets.name == "dataplane_policy_bytes"


def test_a_background_refresh_never_holds_up_a_scrape() -> None:
    """In the driver the save runs in a thread: scrapes get the last counters at once."""
    kernel = FakeKernel()
    now = [0.0]
    started: list[Callable[[], None]] = []
    metrics = Metrics(process=False)
    metrics.register(
        PolicyCounters(
            lambda: RULES,
            kernel.save,
            metrics=metrics,
            min_interval=5.0,
            clock=lambda: now[0],
            refresh_with=started.append,  # a thread that has not run yet
        )
    )
    r = metrics.registry
    assert samples(r, "dataplane_policy_packets_total") == {}  # nothing read yet
    assert len(started) == 1
    now[0] = 10.0
    samples(r, "dataplane_policy_packets_total")
    assert len(started) == 1  # one refresh at a time, however many scrapes
    started[0]()  # the thread runs
    assert samples(r, "dataplane_policy_packets_total") == {LABELS: 7.0, ALLOW_LABELS: 11.0}
    assert len(started) == 2  # the scrape after it, due again, started the next


def test_no_save_while_the_dataplane_is_being_programmed() -> None:
    kernel = FakeKernel()
    applying = [True]
    metrics = Metrics(process=False)
    metrics.register(
        PolicyCounters(lambda: RULES, kernel.save, metrics=metrics, busy=lambda: applying[0])
    )
    r = metrics.registry
    assert samples(r, "dataplane_policy_packets_total") == {}
    assert samples(r, "felix_iptables_save_calls_total") == {(): 0.0}
    applying[0] = False  # the apply ended: the next scrape reads
    assert samples(r, "dataplane_policy_packets_total") == {LABELS: 7.0, ALLOW_LABELS: 11.0}
