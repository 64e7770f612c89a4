"""A log cut inside a frame (a --record file copied from a running node) is read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from dataplane.wire.framing import encode_frames
from dataplane.wire.msglog import read_log
from tests.conftest import REPO

DEMO_LOG = REPO / "examples" / "demo-node.log"
DRIVER = [sys.executable, "-m", "dataplane"]


def _logs(tmp_path: Path) -> tuple[Path, Path, int]:
    """The demo log cut 5 bytes into its last frame; the same without that
    frame; and the byte offset where the cut frame starts."""
    frames = read_log(DEMO_LOG)
    complete = encode_frames(frames[:-1])
    data = DEMO_LOG.read_bytes()
    assert data.startswith(complete)
    cut, whole = tmp_path / "cut.log", tmp_path / "whole.log"
    cut.write_bytes(data[: len(complete) + 5])
    whole.write_bytes(complete)
    return cut, whole, len(complete)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DRIVER, *args], capture_output=True, text=True, cwd=REPO, check=False)


def _timeless(stdout: str) -> list[dict[str, object]]:
    return [{k: v for k, v in o.items() if k != "since"} for o in json.loads(stdout)["objects"]]


def test_show_uses_every_complete_frame_and_warns_once_with_the_offset(tmp_path: Path) -> None:
    cut, whole, offset = _logs(tmp_path)
    shown = _run("show", "--log", str(cut), "--json")
    assert shown.returncode == 0, shown.stderr
    warnings = [line for line in shown.stderr.splitlines() if "inside a frame" in line]
    assert len(warnings) == 1 and f"at byte {offset} " in warnings[0], shown.stderr
    assert _timeless(shown.stdout) == _timeless(_run("show", "--log", str(whole), "--json").stdout)


def test_explain_and_replay_read_a_cut_log(tmp_path: Path) -> None:
    cut, _, offset = _logs(tmp_path)
    query = ["--from", "10.65.0.10", "--to", "10.65.0.20", "--proto", "tcp", "--port", "80"]
    said = _run("explain", "--log", str(cut), *query)
    assert said.returncode == 0, said.stderr
    assert f"at byte {offset} " in said.stderr
    replayed = _run("replay", str(cut))
    assert replayed.returncode == 0, replayed.stderr
    assert f"at byte {offset} " in replayed.stderr
