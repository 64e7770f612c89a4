"""Endpoint-status files under Felix: what its reporter writes from our status stream.

The real driver process (as Felix starts it: the console script, no
arguments, fds 3/4) feeds a fake of Felix's file reporter
(tests/felix_status_reporter.py) with everything it sends. Across a restart
of both (Felix restarts its driver with itself), the directory must hold
exactly one file per programmed workload, with Felix's content, and nothing
stale.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.conftest import workload
from tests.felix_harness import FelixHarness
from tests.felix_status_reporter import FakeFelixStatusFiles, status_file_content, status_file_name

DRIVER = Path(sys.executable).parent / "dataplane-driver"


def _start() -> FelixHarness:
    env = {**os.environ, "DATAPLANE_PLATFORM": "sim"}
    return FelixHarness(program=[str(DRIVER)], cwd=Path("/"), env=env)


def _expected(*updates: pb.WorkloadEndpointUpdate) -> dict[str, bytes]:
    return {status_file_name(u.id): status_file_content(u.endpoint) for u in updates}


@pytest.mark.slow
def test_status_files_match_the_programmed_workloads_across_a_restart(tmp_path: Path) -> None:
    directory = tmp_path / "endpoint-status"
    a = workload("prod/a", "cali0a", "10.65.0.1/32")
    b = workload("prod/b", "cali0b", "10.65.0.2/32")
    c = workload("prod/c", "cali0c", "10.65.0.3/32")
    idle = workload("prod/idle", "cali0d", "10.65.0.4/32", state="inactive")

    felix = _start()
    reporter = FakeFelixStatusFiles(directory)
    try:
        felix.send(pb.ConfigUpdate(config={"FelixHostname": "node-1"}), a, b, c, idle, pb.InSync())
        for envelope in felix.recv_until("dataplane_in_sync"):
            reporter.feed(envelope)
        assert reporter.files() == _expected(a, b, c)  # the inactive one is down: no file
        # Same status, new addresses: Felix must hear of it or b's file goes stale.
        b = workload("prod/b", "cali0b", "10.65.0.22/32")
        felix.send(b)
        for envelope in felix.recv_until("workload_endpoint_status_update"):
            reporter.feed(envelope)
        assert reporter.files() == _expected(a, b, c)
        felix.proc.send_signal(signal.SIGTERM)
        code, err = felix.wait(timeout=4.0)
        assert code == 0, err
    finally:
        felix.kill()
    assert reporter.skipped == 0

    # c went away while both were down; e is new. A new Felix, a new driver.
    e = workload("prod/e", "cali0e", "10.65.0.5/32")
    felix = _start()
    reporter = FakeFelixStatusFiles(directory)
    try:
        felix.send(pb.ConfigUpdate(config={"FelixHostname": "node-1"}), a, b, e, pb.InSync())
        for envelope in felix.recv_until("dataplane_in_sync"):
            reporter.feed(envelope)
        assert reporter.files() == _expected(a, b, e)
    finally:
        felix.kill()


def test_without_the_endpoint_felix_writes_nothing(tmp_path: Path) -> None:
    """The guard on the fake: an update without field 3 is what Felix skips."""
    reporter = FakeFelixStatusFiles(tmp_path / "endpoint-status")
    wid = pb.WorkloadEndpointID(orchestrator_id="k8s", workload_id="prod/a", endpoint_id="eth0")
    bare = pb.WorkloadEndpointStatusUpdate(id=wid, status=pb.EndpointStatus(status="up"))
    reporter.feed(pb.FromDataplane(workload_endpoint_status_update=bare))
    reporter.feed(pb.FromDataplane(dataplane_in_sync=pb.DataplaneInSync()))
    assert (reporter.files(), reporter.skipped) == ({}, 1)
    assert (
        status_file_name(
            pb.WorkloadEndpointID(
                orchestrator_id="k8s", workload_id="default/t est pod1", endpoint_id="eth0"
            )
        )
        == "k8s default%2Ft%20est%20pod1 eth0"
    )
