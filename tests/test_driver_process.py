"""driver.py as a real subprocess, driven exactly as Felix drives it."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import encode_frame
from dataplane.wire.msglog import read_log
from tests.conftest import REPO, ipset, workload
from tests.felix_harness import FelixHarness
from tests.waiting import eventually

pytestmark = pytest.mark.slow

POLICY = pb.ActivePolicyUpdate(
    id=pb.PolicyID(name="allow-web", namespace="ns", kind="NetworkPolicy"),
    policy=pb.Policy(
        tier="default",
        inbound_rules=[
            pb.Rule(action="allow", protocol=pb.Protocol(name="tcp"), src_ip_set_ids=["s:web"])
        ],
    ),
)


def test_felix_mode_handshake_status_and_clean_exit(tmp_path: Path) -> None:
    record = tmp_path / "recorded.log"
    felix = FelixHarness("--platform", "sim", "--record", str(record))
    sent = [
        pb.ConfigUpdate(config={"ReportingIntervalSecs": "1", "FelixHostname": "node-1"}),
        ipset("s:web", "10.0.0.1"),
        POLICY,
        workload("ns/web-1", "cali1234", "10.0.0.1/32"),
        pb.InSync(),
    ]
    felix.send(*sent)
    got = felix.recv_until("dataplane_in_sync")
    got += felix.recv_until("process_status_update")
    kinds = [e.WhichOneof("payload") for e in got]
    assert "workload_endpoint_status_update" in kinds
    assert kinds.count("dataplane_in_sync") == 1
    seqs = [e.sequence_number for e in got]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) and seqs[0] >= 1
    status = next(e for e in got if e.HasField("workload_endpoint_status_update"))
    assert status.workload_endpoint_status_update.status.status == "up"
    felix.close_input()
    code, err = felix.wait()
    assert code == 0, err
    assert "stopped cleanly" in err
    # The recording is a replayable log of exactly what was sent.
    assert [e.WhichOneof("payload") for e in read_log(record)] == [
        "config_update",
        "ipset_update",
        "active_policy_update",
        "workload_endpoint_update",
        "in_sync",
    ]


def test_as_felix_starts_it_no_dataplane_in_sync_goes_to_felix(tmp_path: Path) -> None:
    """No Felix release takes DataplaneInSync from a driver: each logs two warnings.

    By default the driver does not send it; the status files, which wait for
    it, are written all the same.
    """
    felix = FelixHarness("--platform", "sim", send_in_sync=False)
    felix.send(
        pb.ConfigUpdate(config={"ReportingIntervalSecs": "1", "FelixHostname": "node-1"}),
        workload("ns/web-1", "cali1234", "10.0.0.1/32"),
        pb.InSync(),
    )
    got = felix.recv_until("workload_endpoint_status_update")
    got += felix.recv_until("process_status_update")
    assert "dataplane_in_sync" not in [e.WhichOneof("payload") for e in got]
    status_dir = felix.status_prefix / "endpoint-status"
    eventually(
        lambda: status_dir.exists() and os.listdir(status_dir) == ["k8s ns%2Fweb-1 eth0"],
        what="the endpoint's status file",
    )
    felix.close_input()
    code, err = felix.wait()
    assert code == 0, err


def _fatal_line(err: str) -> str:
    lines = [line for line in err.splitlines() if "CRITICAL" in line]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    ("garbage", "expect"),
    [
        (struct.pack("<Q", 1 << 40), "exceeds the limit"),
        (struct.pack("<Q", 100) + b"short", "truncated frame"),
        (struct.pack("<Q", 5) + b"\xff\xff\xff\xff\xff", "undecodable envelope"),
        (
            encode_frame(
                pb.FromDataplane(sequence_number=9, dataplane_in_sync=pb.DataplaneInSync())
            ),
            "not a ToDataplane envelope",
        ),
    ],
)
def test_malformed_input_stops_with_one_line(garbage: bytes, expect: str) -> None:
    felix = FelixHarness("--platform", "sim")
    felix.send(ipset("s:a", "10.0.0.1"), pb.InSync())
    felix.recv_until("dataplane_in_sync")
    felix.send_raw(garbage)
    felix.close_input()
    code, err = felix.wait()
    assert code == 1
    line = _fatal_line(err)
    assert expect in line
    assert "(frame 2, last good seq 2)" in line


def test_a_frame_master_never_sends_after_in_sync_is_refused_and_the_driver_goes_on() -> None:
    """A v3.33 stream settled, then tag 37 (only v3.30-v3.32 define it): one line, no exit."""
    felix = FelixHarness("--platform", "sim")
    felix.send(
        pb.ConfigUpdate(config={"FelixHostname": "node-1"}),
        ipset("s:web", "10.0.0.1"),
        POLICY,
        pb.HostMetadataUpdate(hostname="node-1", ipv4_addr="192.0.2.1/24"),
        pb.InSync(),
    )
    felix.recv_until("dataplane_in_sync")
    felix.send(pb.HostMetadataV4V6Update(hostname="node-2", ipv4_addr="192.0.2.2/24"))
    felix.send(workload("ns/web-1", "cali1234", "10.0.0.1/32"))
    status = felix.recv_until("workload_endpoint_status_update")[-1]
    assert status.workload_endpoint_status_update.status.status == "up"
    felix.close_input()
    code, err = felix.wait()
    assert code == 0, err
    refused = [line for line in err.splitlines() if "message refused" in line]
    assert len(refused) == 1, err
    assert "seq=6 HostMetadataV4V6Update (field 37) arrived" in refused[0]


def test_without_felix_pipes_it_explains_itself() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "driver.py")],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        close_fds=True,
        check=False,
    )
    assert result.returncode == 2
    assert "fd 3" in result.stderr and "driver.py --help" in result.stderr


def test_replay_prints_the_state(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "driver.py"), "replay", str(REPO / "examples/demo-node.log")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.startswith("# replayed 41 messages (0 rejected)")
    assert "in sync: yes" in result.stdout
    assert "workload endpoints (7):" in result.stdout


def test_replay_of_a_log_cut_mid_frame_uses_its_complete_frames(tmp_path: Path) -> None:
    # A --record file copied from a running node: its last frame is cut.
    log = tmp_path / "cut.log"
    log.write_bytes((REPO / "examples/demo-node.log").read_bytes()[:-7])
    result = subprocess.run(
        [sys.executable, str(REPO / "driver.py"), "replay", str(log)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# replayed 40 messages (0 rejected)")
    assert result.stderr.count("inside a frame") == 1


def test_help_and_version() -> None:
    helptext = subprocess.run(
        [sys.executable, str(REPO / "driver.py"), "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for word in ("fd 3", "fd 4", "replay", "version", "--record", "--max-frame-bytes"):
        assert word in helptext
    version = subprocess.run(
        [sys.executable, str(REPO / "driver.py"), "version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert version.startswith("dataplane ")
