"""The real-Felix benchmark's probe (benchmarks/_felix_relay.py) between Felix and the driver.

Its timestamps are the benchmark's split of a new pod's latency into
Felix's share and ours: each must fall between the write that brought the
frame and the reply it caused. It must pass every byte on both ways (the
driver, started behind it, answers for the endpoint it was sent), keep the
driver's DataplaneInSync from Felix (which logs a warning for it) and pass
Felix's stop signal on, exiting with the driver's code.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.conftest import workload
from tests.felix_harness import FelixHarness
from tests.test_sigterm import console_script

RELAY = Path(__file__).resolve().parents[1] / "benchmarks" / "_felix_relay.py"


def _lines(log: Path) -> list[tuple[float, str, str]]:
    """(time, direction, what) of each line the relay wrote."""
    out = []
    for line in log.read_text().splitlines():
        at, direction, what = line.split(" ", 2)
        out.append((float(at), direction, what))
    return out


@pytest.mark.slow
def test_relay_passes_both_ways_times_each_frame_and_keeps_in_sync_from_felix(
    tmp_path: Path,
) -> None:
    log = tmp_path / "relay.log"
    env = {
        **os.environ,
        "DATAPLANE_PLATFORM": "sim",
        "DATAPLANE_BENCH_DRIVER": str(console_script()),
        "DATAPLANE_BENCH_RELAY_LOG": str(log),
    }
    # As Felix starts its driver: no DataplaneInSync asked for (the relay asks).
    felix = FelixHarness(
        program=[sys.executable, str(RELAY)], cwd=Path("/"), env=env, send_in_sync=False
    )
    try:
        felix.send(pb.ConfigUpdate(config={"FelixHostname": "node-1"}), pb.InSync())
        replies = felix.recv_until("process_status_update")
        sent = time.monotonic()
        felix.send(workload("ns/web-1", "cali1234", "10.0.0.1/32"))
        # Everything from the start: the first apply's DataplaneInSync came before.
        replies += felix.recv_until("workload_endpoint_status_update")
        answered = time.monotonic()
    finally:
        felix.proc.send_signal(signal.SIGTERM)
        code, err = felix.wait(timeout=10)
    assert code == 0, err  # the driver's own code for a stop signal
    assert "SIGTERM: stopping" in err  # the signal reached the driver
    assert replies[-1].workload_endpoint_status_update.id.workload_id == "ns/web-1"
    assert all(r.WhichOneof("payload") != "dataplane_in_sync" for r in replies)

    lines = _lines(log)
    assert lines[0][1] == "pid"
    seen = [(direction, what) for _, direction, what in lines[1:]]
    assert ("in", "config_update") in seen
    assert ("in", "in_sync") in seen
    assert ("out", "dataplane_in_sync") in seen  # logged, not passed on
    frame = next(t for t, d, w in lines if (d, w) == ("in", "workload_endpoint_update ns/web-1"))
    status = next(
        t for t, d, w in lines if (d, w) == ("out", "workload_endpoint_status_update ns/web-1")
    )
    assert sent <= frame <= status <= answered
