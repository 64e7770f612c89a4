"""The driver never claims a dataplane it did not program.

Felix believes DataplaneInSync; scripts believe exit codes. So: no silent
fallback to the in-memory sim, no "in sync" from a process that cannot
program the kernel, a non-zero exit when a replay ends unprogrammed, and
usage errors in one line.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from dataplane.cli import felix_mode, platforms
from dataplane.cli.parser import build
from dataplane.core.loop import Dataplane
from dataplane.errors import PlatformUnavailableError, ProgrammingError
from dataplane.linux.iptables.backend import detect_backend
from dataplane.linux.kernel.cmd import CommandResult
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import encode_frame
from dataplane.wire.msgs import to_dataplane
from dataplane.wire.transport import FileSource
from tests.conftest import REPO, workload
from tests.felix_harness import FelixHarness

DRIVER = [sys.executable, str(REPO / "driver.py")]
# As root, but without CAP_NET_ADMIN: what a container without the
# capability, or a mistaken securityContext, looks like.
NO_NET_ADMIN = ["setpriv", "--bounding-set", "-net_admin", "--inh-caps", "-net_admin"]
can_drop_capability = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv"
)


def frames(*payloads: object) -> bytes:
    return b"".join(
        encode_frame(to_dataplane(p, seq))  # type: ignore[arg-type]
        for seq, p in enumerate(payloads, 1)
    )


def run(*args: str, wrapper: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(wrapper or []), *DRIVER, *args], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("target", ["does-not-exist.log", "examples"])
def test_replay_of_a_missing_file_or_a_directory_is_one_line(target: str) -> None:
    result = run("replay", str(REPO / target))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "cannot read" in result.stderr and target in result.stderr


def test_replay_without_insync_exits_non_zero(tmp_path: Path) -> None:
    log = tmp_path / "partial.log"
    log.write_bytes(frames(workload("ns/a", "cali1", "10.0.0.1/32")))
    result = run("replay", str(log))
    assert result.returncode == 1
    assert "in sync: no" in result.stdout
    assert "before InSync: nothing was programmed" in result.stderr


def test_an_apply_that_never_succeeds_is_reported_not_programmed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sim = SimPlatform()
    sim.fail_applies = 1000
    dataplane = Dataplane(sim)
    log = io.BytesIO(frames(workload("ns/a", "cali1", "10.0.0.1/32"), pb.InSync()))
    trio.run(dataplane.run, FileSource(log))
    with caplog.at_level(logging.INFO):
        assert felix_mode.report_end(dataplane, "stopped") == 1
    assert "NOT programmed" in caplog.text and "injected apply failure" in caplog.text
    assert "cleanly" not in caplog.text


def test_auto_never_falls_back_to_the_sim(monkeypatch: pytest.MonkeyPatch) -> None:
    real_which = shutil.which
    monkeypatch.setattr(platforms, "_has_net_admin", lambda: True)
    monkeypatch.setattr(
        "dataplane.cli.platforms.shutil.which",
        lambda name: None if name == "ipset" else real_which(name),
    )
    with pytest.raises(PlatformUnavailableError, match="ipset not installed"):
        platforms.platform("auto", build({}).parse_args([]))
    assert isinstance(platforms.platform("sim", build({}).parse_args([])), SimPlatform)


@can_drop_capability
def test_felix_mode_without_net_admin_stops_before_claiming_anything() -> None:
    felix = FelixHarness("--platform", "auto", wrapper=NO_NET_ADMIN)
    felix.send(pb.InSync())
    with pytest.raises(EOFError):
        felix.recv(timeout=20)  # nothing sent: above all no DataplaneInSync
    code, err = felix.wait()
    assert code == 1
    assert "cannot program this node: needs root (CAP_NET_ADMIN)" in err
    assert "--platform sim" in err


@can_drop_capability
def test_linux_replay_without_net_admin_says_so_up_front() -> None:
    result = run("--platform", "linux", "replay", "examples/demo-node.log", wrapper=NO_NET_ADMIN)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "driver.py replay: cannot program this node: needs root (CAP_NET_ADMIN) to program"
        " iptables, IP sets and routes; use --platform sim to run without a dataplane"
    ]


class DeniedRunner:
    """Both backends installed, neither readable: what iptables says to a non-root user."""

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        return CommandResult(
            4,
            b"",
            b"iptables-save v1.8.9 (nf_tables): Could not fetch rule set generation id:"
            b" Permission denied (you must be root)\n",
        )


def test_backend_detection_keeps_the_tools_own_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        "dataplane.linux.iptables.backend.shutil.which", lambda name: f"/usr/sbin/{name}"
    )
    with pytest.raises(ProgrammingError, match="Permission denied \\(you must be root\\)"):
        trio.run(detect_backend, DeniedRunner(), "auto")
