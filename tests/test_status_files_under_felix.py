"""Endpoint-status files under Felix: the driver writes what Felix's reporter would.

Felix's own reporter never writes a file for an external driver (its
connector drops our ``DataplaneInSync``; tests/felix_status_reporter.py
models that, and is fed everything the driver sends). So the driver, run
as Felix runs it (the console script, no arguments, fds 3/4), writes them
itself: across a restart of both (Felix restarts its driver with itself),
the directory must hold exactly one file per workload that is up, with
Felix's name and content, and nothing stale.
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
from tests.waiting import eventually

DRIVER = Path(sys.executable).parent / "dataplane-driver"

pytestmark = pytest.mark.slow


def _start() -> FelixHarness:
    env = {**os.environ, "DATAPLANE_PLATFORM": "sim"}
    return FelixHarness(program=[str(DRIVER)], cwd=Path("/"), env=env, own_status_dir=False)


def _expected(*updates: pb.WorkloadEndpointUpdate) -> dict[str, bytes]:
    return {status_file_name(u.id): status_file_content(u.endpoint) for u in updates}


def _files(directory: Path) -> dict[str, bytes]:
    """What the directory holds now; the driver may delete a file between the
    listing and its read (that one is gone: left out, and the caller polls)."""
    found: dict[str, bytes] = {}
    for path in sorted(directory.iterdir()):
        try:
            found[path.name] = path.read_bytes()
        except FileNotFoundError:
            continue
    return found


def _until(felix: FelixHarness, reporter: FakeFelixStatusFiles, kind: str) -> None:
    for envelope in felix.recv_until(kind):
        reporter.feed(envelope)


def test_status_files_match_the_programmed_workloads_across_a_restart(tmp_path: Path) -> None:
    config = pb.ConfigUpdate(
        config={"FelixHostname": "node-1", "EndpointStatusPathPrefix": str(tmp_path)}
    )
    directory = tmp_path / "endpoint-status"
    directory.mkdir()
    (directory / "k8s prod%2Fgone eth0").write_bytes(b"{}")  # a pod deleted while we were down
    a = workload("prod/a", "cali0a", "10.65.0.1/32")
    b = workload("prod/b", "cali0b", "10.65.0.2/32")
    c = workload("prod/c", "cali0c", "10.65.0.3/32")
    idle = workload("prod/idle", "cali0d", "10.65.0.4/32", state="inactive")

    felix = _start()
    reporter = FakeFelixStatusFiles(directory)
    try:
        felix.send(config, a, b, c, idle, pb.InSync())
        _until(felix, reporter, "dataplane_in_sync")
        # What Felix's reporter would write (it never does: no DataplaneInSync
        # reaches it) is what the driver wrote; the stale file is gone.
        assert reporter.wanted() == _expected(a, b, c)  # the inactive one is down: no file
        eventually(lambda: _files(directory) == reporter.wanted(), what="status files")
        # Same status, new addresses: the file follows the endpoint.
        b = workload("prod/b", "cali0b", "10.65.0.22/32")
        felix.send(b)
        _until(felix, reporter, "workload_endpoint_status_update")
        # A removed pod's file goes with it.
        felix.send(pb.WorkloadEndpointRemove(id=c.id))
        _until(felix, reporter, "workload_endpoint_status_remove")
        assert reporter.wanted() == _expected(a, b)
        eventually(lambda: _files(directory) == reporter.wanted(), what="status files")
        felix.proc.send_signal(signal.SIGTERM)
        code, err = felix.wait(timeout=4.0)
        assert code == 0, err
    finally:
        felix.kill()
    assert reporter.skipped == 0

    # e is new while both were down. A new Felix, a new driver: a is kept.
    e = workload("prod/e", "cali0e", "10.65.0.5/32")
    felix = _start()
    reporter = FakeFelixStatusFiles(directory)
    try:
        felix.send(config, a, e, pb.InSync())
        _until(felix, reporter, "dataplane_in_sync")
        assert reporter.wanted() == _expected(a, e)
        eventually(lambda: _files(directory) == reporter.wanted(), what="status files")
    finally:
        felix.kill()


def test_felix_s_own_reporter_writes_nothing_for_an_external_driver(tmp_path: Path) -> None:
    """The model of Felix: DataplaneInSync never reaches it, so no reconcile ever runs."""
    reporter = FakeFelixStatusFiles(tmp_path / "endpoint-status")
    a = workload("prod/a", "cali0a", "10.65.0.1/32")
    up = pb.WorkloadEndpointStatusUpdate(
        id=a.id, status=pb.EndpointStatus(status="up"), endpoint=a.endpoint
    )
    reporter.feed(pb.FromDataplane(workload_endpoint_status_update=up))
    reporter.feed(pb.FromDataplane(dataplane_in_sync=pb.DataplaneInSync()))
    assert reporter.files() == {}
    assert reporter.wanted() == _expected(a)


def test_without_the_endpoint_felix_writes_nothing(tmp_path: Path) -> None:
    """The guard on the fake: an update without field 3 is what Felix skips."""
    reporter = FakeFelixStatusFiles(tmp_path / "endpoint-status", external=False)
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
