"""Felix's shutdown: SIGTERM, then SIGKILL 4 s later. The driver is out in 2 s.

The dataplane is left as programmed (Felix restarts its driver with a fresh
snapshot, and the next start adopts what is there); the apply in progress
may finish if it does so within the grace period, else it is abandoned.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from dataplane.core.loop import Dataplane
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.conftest import run_trio, workload
from tests.felix_harness import FelixHarness


def console_script() -> Path:
    """The ``dataplane-driver`` that ``pip install -e .`` put beside this interpreter."""
    script = Path(sys.executable).parent / "dataplane-driver"
    assert script.exists(), f"{script} is missing: pip install -e . into this venv"
    return script


# --- the real process, as Felix runs it ------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_felix_stop_signal_exits_0_within_2s_with_one_line(signum: signal.Signals) -> None:
    # As Felix does it: the console script, no arguments, Felix's environment
    # (plus our variable: the sim, so that no root is needed), from /.
    env = {**os.environ, "DATAPLANE_PLATFORM": "sim"}
    felix = FelixHarness(program=[str(console_script())], cwd=Path("/"), env=env)
    felix.send(
        pb.ConfigUpdate(config={"FelixHostname": "node-1"}),
        workload("ns/web-1", "cali1234", "10.0.0.1/32"),
        pb.InSync(),
    )
    felix.recv_until("dataplane_in_sync")
    # fd 3 stays open: the pipe reader thread is blocked reading it.
    sent_at = time.monotonic()
    felix.proc.send_signal(signum)
    code, err = felix.wait(timeout=2.0)  # TimeoutExpired past the deadline
    assert time.monotonic() - sent_at < 2.0
    assert code == 0, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if f"{signum.name}:" in line]
    assert len(lines) == 1, err
    assert f"{signum.name}: stopping after 3 messages; dataplane left as programmed" in lines[0]
    assert "platform sim" in err  # DATAPLANE_PLATFORM took effect
    # No other account of the end: the one line is it.
    assert "stopped cleanly" not in err and "end of input" not in err


@pytest.mark.slow
def test_sigterm_before_insync_says_nothing_was_programmed() -> None:
    env = {**os.environ, "DATAPLANE_PLATFORM": "sim"}
    felix = FelixHarness(program=[str(console_script())], cwd=Path("/"), env=env)
    felix.send(pb.ConfigUpdate(config={"FelixHostname": "node-1"}))
    felix.recv_until("process_status_update")  # the loop is running
    felix.proc.send_signal(signal.SIGTERM)
    code, err = felix.wait(timeout=2.0)
    assert code == 0, err
    lines = [line for line in err.splitlines() if "SIGTERM:" in line]
    assert len(lines) == 1, err
    assert "before InSync; nothing was programmed" in lines[0]


# --- Dataplane.stop, under a mock clock -----------------------------------------------


class GatedPlatform(SimPlatform):
    """A sim whose applies wait for the test to let them finish."""

    def __init__(self) -> None:
        super().__init__()
        self.started = trio.Event()
        self.release = trio.Event()

    async def apply(self) -> None:
        self.started.set()
        await self.release.wait()
        await super().apply()


def test_stop_while_waiting_for_input_returns_at_once() -> None:
    async def main() -> None:
        dataplane = Dataplane(SimPlatform())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dataplane.run)
            dataplane.send_message(workload("ns/a", "cali1", "10.0.0.1/32"))
            dataplane.send_message(pb.InSync())
            while not (await dataplane.recv_message()).HasField("dataplane_in_sync"):
                pass
            start = trio.current_time()
            dataplane.stop(grace=1.5)
        assert trio.current_time() == start
        assert dataplane.in_sync and not dataplane.apply_abandoned

    run_trio(main)


def test_stop_lets_an_apply_that_finishes_within_the_grace_finish() -> None:
    async def main() -> None:
        platform = GatedPlatform()
        dataplane = Dataplane(platform)
        dataplane.send_message(workload("ns/a", "cali1", "10.0.0.1/32"))
        dataplane.send_message(pb.InSync())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dataplane.run)
            await platform.started.wait()
            dataplane.stop(grace=1.5)
            platform.release.set()
        assert platform.successful_applies == 1
        assert dataplane.in_sync and not dataplane.apply_abandoned
        assert platform.apply_count == 1

    run_trio(main)


def test_stop_abandons_an_apply_that_outlasts_the_grace() -> None:
    async def main() -> None:
        platform = GatedPlatform()  # never released: the apply would never end
        dataplane = Dataplane(platform)
        dataplane.send_message(workload("ns/a", "cali1", "10.0.0.1/32"))
        dataplane.send_message(pb.InSync())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dataplane.run)
            await platform.started.wait()
            start = trio.current_time()
            dataplane.stop(grace=1.5)
        assert trio.current_time() - start == pytest.approx(1.5)
        assert dataplane.apply_abandoned
        assert platform.successful_applies == 0 and not dataplane.in_sync

    run_trio(main)


def test_stop_before_run_makes_run_return() -> None:
    async def main() -> None:
        dataplane = Dataplane(SimPlatform())
        dataplane.stop(grace=1.5)
        with trio.fail_after(1):
            await dataplane.run()

    run_trio(main)


@pytest.mark.slow
def test_the_console_script_runs_from_anywhere() -> None:
    result = subprocess.run(
        [str(console_script()), "version"], capture_output=True, text=True, cwd="/", check=True
    )
    assert result.stdout.startswith("dataplane ")
