"""driver.py --platform windows --hns-fake FILE, driven through the pipes as Felix does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dataplane.windows.hns.hcn import HnsVersion
from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.hns import calico_host
from tests.felix_harness import REPO, FelixHarness
from tests.kernel import scenario as sc
from tests.windows.windows_node import Model, disagreements, messages


def host_file(tmp_path: Path, version: HnsVersion) -> Path:
    path = tmp_path / "host.json"
    calico_host(sc.PODS, version, path=path).flush()
    return path


def run_driver(path: Path, *payloads: object) -> tuple[int, str, list[pb.FromDataplane]]:
    felix = FelixHarness("--platform", "windows", "--hns-fake", str(path))
    felix.send(*payloads)  # type: ignore[arg-type]
    out = felix.recv_until("dataplane_in_sync", timeout=60)
    felix.close_input()
    code, err = felix.wait(timeout=60)
    return code, err, out


@pytest.mark.parametrize("version", [HnsVersion(12, 0), HnsVersion(15, 4)], ids=str)
def test_policy_matrix_through_the_pipe_then_a_restart_makes_no_modify_call(
    tmp_path: Path, version: HnsVersion
) -> None:
    path = host_file(tmp_path, version)
    msgs = messages()
    code, err, out = run_driver(path, *msgs)
    assert code == 0, err
    host = json.loads(path.read_text())
    assert disagreements(host, Model.of(msgs)) == []
    up = [
        e.workload_endpoint_status_update.id.workload_id
        for e in out
        if e.WhichOneof("payload") == "workload_endpoint_status_update"
        and e.workload_endpoint_status_update.status.status == "up"
    ]
    assert sorted(up) == sorted(p.workload_id for p in sc.PODS)
    assert "fails closed" in err and "allow-web-to-api rule 1" in err
    calls = host["Calls"]
    assert calls["ModifyEndpoint"] == len(sc.PODS)

    code, err, _ = run_driver(path, *msgs)
    assert code == 0, err
    again = json.loads(path.read_text())
    assert again["Calls"]["ModifyEndpoint"] == calls["ModifyEndpoint"]
    assert again["Calls"].get("ModifyNetwork", 0) == calls.get("ModifyNetwork", 0)
    assert again["Endpoints"] == host["Endpoints"]


def test_windows_needs_a_host_file_off_windows_and_says_so() -> None:
    felix = FelixHarness("--platform", "windows")
    code, err = felix.wait(timeout=60)
    assert code == 1
    assert "--hns-fake FILE" in err


def test_the_readme_commands_program_and_print_a_simulated_host(tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    subprocess.run([sys.executable, "-m", "testbed.hns", str(path)], cwd=REPO, check=True)
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "driver.py"),
            "--platform",
            "windows",
            "--hns-fake",
            str(path),
            "replay",
            str(REPO / "examples/demo-node.log"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "windows platform, HNS 15.4" in result.stdout
    assert "no HNS endpoint yet" not in result.stdout
    assert " In  Allow proto 6 " in result.stdout
    host = json.loads(path.read_text())
    assert host["Calls"]["ModifyEndpoint"] == 7  # one per pod of the demo
