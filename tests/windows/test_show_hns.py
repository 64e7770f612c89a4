"""show --hns FILE: what a simulated HNS host holds, after a real driver programmed it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dataplane.windows.hns.hcn import HnsVersion
from tests.felix_harness import REPO
from tests.windows.test_windows_driver import host_file, run_driver
from tests.windows.windows_node import messages

pytestmark = pytest.mark.slow


def _show(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dataplane", "show", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )


def test_show_lists_every_hns_object_the_driver_programmed(tmp_path: Path) -> None:
    path = host_file(tmp_path, HnsVersion(15, 4))
    code, err, _ = run_driver(path, *messages())
    assert code == 0, err
    host = json.loads(path.read_text())
    shown = _show("--hns", str(path), "--json")
    assert shown.returncode == 0, shown.stderr
    records = json.loads(shown.stdout)["objects"]
    endpoints = {r["id"]: r for r in records if r["kind"] == "hns_endpoint"}
    assert set(endpoints) == {e["ID"] for e in host["Endpoints"]}
    for ep in host["Endpoints"]:
        record = endpoints[ep["ID"]]
        assert record["addresses"] == [c["IpAddress"] for c in ep["IpConfigurations"]]
        acls = sum(1 for p in ep.get("Policies") or () if p["Type"] == "ACL")
        assert record["policies"].get("ACL", 0) == acls
    assert {r["status"] for r in records} == {"done"}
    assert {r["kind"] for r in records} >= {"hns_network", "hns_endpoint"}
    # And as a table, on one line per object.
    table = _show("--hns", str(path), "--kind", "hns_endpoint")
    assert f"hns_endpoint ({len(endpoints)})" in table.stdout


def test_a_file_that_is_not_a_host_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "host.json"
    bad.write_text("[1, 2]")
    shown = _show("--hns", str(bad))
    assert shown.returncode == 2
    assert shown.stderr == (
        f"python -m dataplane show: {bad}: not an HNS host file:"
        " the top level is not a JSON object\n"
    )
