"""The shipped example log is current, and replaying it gives the golden state.

Regenerate the golden file after an intended change with
``UPDATE_GOLDEN=1 make pytest``.
"""

from __future__ import annotations

import os

import trio

from dataplane.core.loop import Dataplane
from dataplane.sim import SimPlatform
from dataplane.wire.msglog import build_log
from dataplane.wire.transport import FileSource
from examples.demo_node import LOG_PATH, demo_messages
from tests.conftest import REPO

GOLDEN = REPO / "tests" / "golden" / "demo-node.state.txt"


def test_committed_example_log_is_current() -> None:
    assert LOG_PATH.read_bytes() == build_log(demo_messages()), (
        "examples/demo-node.log is stale: run `python examples/demo_node.py`"
    )


def test_replaying_the_example_gives_the_golden_state() -> None:
    platform = SimPlatform()
    dp = Dataplane(platform)
    with LOG_PATH.open("rb") as log:
        trio.run(dp.run, FileSource(log))
    assert dp.in_sync and dp.stats.rejected == 0
    dump = platform.dump()
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(dump)
    assert dump == GOLDEN.read_text()
