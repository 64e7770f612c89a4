"""A real driver process with --listen: metrics, health and state over real HTTP.

The driver runs as Felix runs it (pipes on fds 3 and 4), on the in-memory
platform so that these tests need no privilege; the kernel's side (a
refused write, a hanging restore) is in tests/kernel/test_ops_kernel.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.msglog import read_log
from tests.felix_harness import REPO, FelixHarness
from tests.waiting import eventually

pytestmark = pytest.mark.slow

DEMO_LOG = REPO / "examples" / "demo-node.log"
DRIVER = [sys.executable, "-m", "dataplane"]


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


def _json(port: int, path: str) -> tuple[int, Any]:
    status, body = _get(port, path)
    return status, json.loads(body)


def _samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text = _get(port, "/metrics")
    assert status == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def live() -> Iterator[tuple[FelixHarness, int]]:
    harness = FelixHarness("--platform", "sim", "--listen", "127.0.0.1:0", program=DRIVER, cwd=REPO)
    harness.drain()
    found: list[int] = []

    def port_logged() -> bool:
        match = re.search(r"on http://127\.0\.0\.1:(\d+)", harness.stderr_so_far())
        if match:
            found.append(int(match[1]))
        return bool(match)

    eventually(port_logged, 30.0, "the driver never said where it listens")
    yield harness, found[0]
    harness.close_input()
    harness.wait()


def test_ready_only_once_programmed_and_counters_move_with_the_work(
    live: tuple[FelixHarness, int],
) -> None:
    harness, port = live
    assert _json(port, "/livez")[0] == 200
    status, body = _json(port, "/readyz")
    assert status == 503
    assert body["checks"][0] == {
        "name": "in-sync",
        "ok": False,
        "detail": "waiting for InSync from the calculation graph",
    }

    envelopes = read_log(DEMO_LOG)
    harness.send_raw(DEMO_LOG.read_bytes())
    eventually(lambda: _json(port, "/readyz")[0] == 200, 30.0, "never ready")

    samples = _samples(port)
    sent = Counter(str(e.WhichOneof("payload")) for e in envelopes)
    for kind, count in sent.items():
        assert samples[("felix_int_dataplane_messages_total", (("type", kind),))] == count
    assert samples[("dataplane_in_sync", ())] == 1
    updates = [e for e in envelopes if e.HasField("workload_endpoint_update")]
    pods = {str(e.workload_endpoint_update.id) for e in updates}
    hosts = {
        e.host_endpoint_update.id.endpoint_id
        for e in envelopes
        if e.HasField("host_endpoint_update")
    }
    assert samples[("felix_active_local_endpoints", ())] == len(pods) + len(hosts)
    latency = (("kind", "workload_endpoint"),)
    # One observation per message, as kube-proxy observes one per change.
    assert samples[("dataplane_network_programming_duration_seconds_count", latency)] == len(
        updates
    )
    assert samples[("felix_int_dataplane_initial_resync_time_seconds", ())] > 0
    assert samples[("process_resident_memory_bytes", ())] > 0
    # The first apply's collect-and-freeze (core/heap.py) is a full collection, timed.
    full = (("generation", "2"),)
    assert samples[("dataplane_gc_pause_seconds_count", full)] >= 1
    assert samples[("dataplane_gc_pause_seconds_sum", full)] > 0

    # One more policy: the policy counter and gauge move by one, and its
    # programming latency is observed once more.
    policy_latency = ("dataplane_network_programming_duration_seconds_count", (("kind", "policy"),))
    before = samples[policy_latency]
    harness._seq = envelopes[-1].sequence_number
    harness.send(
        pb.ActivePolicyUpdate(
            id=pb.PolicyID(name="extra", namespace="default", kind="NetworkPolicy"),
            policy=pb.Policy(tier="default"),
        )
    )

    def counted() -> bool:
        return _samples(port)[policy_latency] == before + 1

    eventually(counted, 30.0, "the policy was never counted")
    after = _samples(port)
    assert (
        after[("felix_int_dataplane_messages_total", (("type", "active_policy_update"),))]
        == sent["active_policy_update"] + 1
    )
    assert (
        after[("felix_active_local_policies", ())]
        == samples[("felix_active_local_policies", ())] + 1
    )


def test_state_of_a_live_node_equals_the_same_log_replayed(
    live: tuple[FelixHarness, int],
) -> None:
    harness, port = live
    harness.send_raw(DEMO_LOG.read_bytes())
    eventually(lambda: _json(port, "/readyz")[0] == 200, 30.0, "never ready")
    status, live_state = _json(port, "/state")
    assert status == 200
    shown = subprocess.run(
        [*DRIVER, "show", "--log", str(DEMO_LOG), "--json"],
        capture_output=True,
        check=True,
        cwd=REPO,
    )
    document = json.loads(shown.stdout)
    assert document["in_sync"] is live_state["in_sync"] is True
    replayed = document["objects"]

    def timeless(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in o.items() if k != "since"} for o in objects]

    assert timeless(live_state["objects"]) == timeless(replayed)
    assert {o["status"] for o in replayed} == {"done"}
    kinds = {o["kind"] for o in replayed}
    assert {"workload_endpoint", "policy", "profile", "ipset"} <= kinds
    # And `show --address` reads the same records from the live driver.
    shown_live = subprocess.run(
        [*DRIVER, "show", "--address", f"127.0.0.1:{port}", "--json"],
        capture_output=True,
        check=True,
        cwd=REPO,
    )
    assert timeless(json.loads(shown_live.stdout)["objects"]) == timeless(replayed)


def test_health_command_probes_for_exec_probes(live: tuple[FelixHarness, int]) -> None:
    harness, port = live

    def health(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*DRIVER, "health", "--address", f"127.0.0.1:{port}", *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=False,
        )

    live_probe = health()
    assert (live_probe.returncode, live_probe.stdout) == (
        0,
        "/livez 200 ok: main-loop: waiting for input\n",
    )
    not_ready = health("--ready")
    assert not_ready.returncode == 1
    assert not_ready.stdout == (
        "/readyz 503 fail: in-sync: waiting for InSync from the calculation graph\n"
    )
    harness.send_raw(DEMO_LOG.read_bytes())
    eventually(lambda: health("--ready").returncode == 0, 30.0, "never ready")


def test_health_of_no_driver_is_a_failure_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [*DRIVER, "health", "--address", "127.0.0.1:9"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith(
        "python -m dataplane health: cannot read http://127.0.0.1:9/livez: "
    )
    assert done.stderr.count("\n") == 1


EXPLAINED = [
    ("10.65.0.10", "10.65.0.20", "tcp", "8080"),  # web -> api: allowed by the KNP
    ("10.65.0.40", "10.65.0.30", "tcp", "5432"),  # prometheus -> db: end of tier
    ("fd00:10:65::a", "fd00:10:65::14", "icmp", None),
]


def test_explain_of_a_live_node_equals_the_same_log_replayed(
    live: tuple[FelixHarness, int],
) -> None:
    harness, port = live
    harness.send_raw(DEMO_LOG.read_bytes())
    eventually(lambda: _json(port, "/readyz")[0] == 200, 30.0, "never ready")
    for src, dst, proto, dport in EXPLAINED:
        query = ["--from", src, "--to", dst, "--proto", proto]
        query += ["--port", dport] if dport else []

        def explain(*source: str, query: list[str] = query) -> Any:
            done = subprocess.run(
                [*DRIVER, "explain", *source, *query, "--json"],
                capture_output=True,
                check=True,
                cwd=REPO,
            )
            return json.loads(done.stdout)

        replayed = explain("--log", str(DEMO_LOG))
        assert explain("--address", f"127.0.0.1:{port}") == replayed
        assert replayed["verdict"] in {"allow", "deny"}
    # A query the evaluator cannot answer is a 400 naming why.
    status, body = _json(port, "/explain?from=10.65.0.10&to=10.65.0.20&proto=tcp")
    assert (status, body) == (400, {"error": "tcp needs --port: policy and services match on it"})
