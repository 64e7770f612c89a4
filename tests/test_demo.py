"""``make demo`` works: the kernel demo as root, the sim fallback otherwise."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from examples import demo
from tests.conftest import REPO

FALLBACK = "not root: showing the in-memory (sim) platform's state instead of programming a kernel"


@pytest.mark.slow
@pytest.mark.parametrize("flags", [[], ["--nftables"]], ids=["iptables", "nftables"])
def test_demo_programs_a_node_and_every_cell_is_as_expected(flags: list[str]) -> None:
    reason = demo.kernel_unavailable(nftables=bool(flags))
    if reason is not None:
        pytest.skip(f"the kernel demo needs root, ip netns, iptables and ipset: {reason}")
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "examples" / "demo.py"), *flags],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    lines = out.splitlines()
    assert any(line.strip().startswith("# replayed 41 messages (0 rejected)") for line in lines)
    backend = "linux platform, nftables:" if flags else "linux platform, iptables backend"
    assert any(line.strip().startswith(backend) for line in lines), out
    match = re.fullmatch(r"matrix: (\d+)/(\d+) cells as expected", lines[-1])
    assert match is not None and match[1] == match[2], out
    # Topology names its namespaces dpt<pid % 10000:04d>...: none of the demo's may remain.
    prefix = f"dpt{proc.pid % 10000:04d}"
    netns = subprocess.run(
        ["ip", "netns", "list"], check=True, capture_output=True, text=True
    ).stdout
    assert [n for n in netns.split() if n.startswith(prefix)] == []


def test_demo_falls_back_to_the_sim_platform_without_root(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # In process, so it also runs as a user who may not exec this interpreter
    # (a venv made by root points into root's home). As root, pretend not to be.
    if os.geteuid() == 0:
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert demo.main([]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == FALLBACK
    assert any(line.startswith("# replayed 41 messages (0 rejected)") for line in lines)
    assert "workload endpoints (7):" in out
