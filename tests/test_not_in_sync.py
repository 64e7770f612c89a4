"""Nothing answers as if in sync when it is not: show, explain and /state say so."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import trio
import trio.testing
from google.protobuf.message import Message

from dataplane.core.loop import Dataplane
from dataplane.ops.metrics import Metrics
from dataplane.ops.observer import Observer
from dataplane.ops.records import state_document
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import encode_frames
from dataplane.wire.msglog import read_log
from tests.conftest import REPO, run_trio

DEMO_LOG = REPO / "examples" / "demo-node.log"
DRIVER = [sys.executable, "-m", "dataplane"]


def _cut_before_in_sync(tmp_path: Path) -> tuple[Path, list[str]]:
    """The demo log up to (not including) its InSync; and the ids of the
    objects the same messages program once InSync follows them."""
    frames = read_log(DEMO_LOG)
    cut = next(i for i, e in enumerate(frames) if e.WhichOneof("payload") == "in_sync")
    path = tmp_path / "cut.log"
    path.write_bytes(encode_frames(frames[:cut]))
    synced = tmp_path / "synced.log"
    synced.write_bytes(encode_frames(frames[: cut + 1]))
    whole = subprocess.run(
        [*DRIVER, "show", "--log", str(synced), "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    objects = json.loads(whole.stdout)["objects"]
    assert objects and {o["status"] for o in objects} == {"done"}
    return path, [o["id"] for o in objects]


def test_show_of_a_log_cut_before_in_sync_lists_what_it_received_as_pending(
    tmp_path: Path,
) -> None:
    path, whole = _cut_before_in_sync(tmp_path)
    shown = subprocess.run(
        [*DRIVER, "show", "--log", str(path), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["in_sync"] is False
    assert document["waiting"] == "Felix's InSync has not arrived"
    assert [o["id"] for o in document["objects"]] == whole  # every object received...
    assert {o["status"] for o in document["objects"]} == {"pending"}  # ...none programmed
    table = subprocess.run(
        [*DRIVER, "show", "--log", str(path)], capture_output=True, text=True, cwd=REPO, check=True
    )
    first = table.stdout.splitlines()[0]
    assert first.startswith("NOT IN SYNC (Felix's InSync has not arrived)"), first


def test_explain_of_a_log_cut_before_in_sync_says_so_and_fails(tmp_path: Path) -> None:
    path, _ = _cut_before_in_sync(tmp_path)
    query = ["--from", "10.65.0.10", "--to", "10.65.0.20", "--proto", "tcp", "--port", "80"]
    said = subprocess.run(
        [*DRIVER, "explain", "--log", str(path), *query],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert said.returncode == 1, said.stderr  # its verdict is not the kernel's
    assert said.stdout.startswith("NOT IN SYNC"), said.stdout
    whole = subprocess.run(
        [*DRIVER, "explain", "--log", str(DEMO_LOG), *query, "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert whole.returncode == 0, whole.stderr
    assert json.loads(whole.stdout)["in_sync"] is True


def test_a_live_node_before_in_sync_publishes_what_it_holds_as_pending() -> None:
    observer = Observer(SimPlatform(), metrics=Metrics(process=False))
    dp = Dataplane(observer.platform, observer=observer)
    ipset = pb.IPSetUpdate(id="s:web", members=["10.65.0.10"])

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            dp.send_message(pb.ConfigUpdate(config={"FelixHostname": "node-1"}))
            dp.send_message(ipset)
            await trio.testing.wait_all_tasks_blocked()
            before = state_document(observer.snapshot())
            assert before["in_sync"] is False
            assert before["waiting"] == "Felix's InSync has not arrived"
            assert [(o["kind"], o["status"]) for o in before["objects"]] == [("ipset", "pending")]
            dp.send_message(pb.InSync())
            await trio.testing.wait_all_tasks_blocked()
            after = state_document(observer.snapshot())
            assert after["in_sync"] is True and after["waiting"] is None
            assert [(o["kind"], o["status"]) for o in after["objects"]] == [("ipset", "done")]
            dp.close_input()

    run_trio(main)


def test_previews_before_in_sync_take_at_most_a_tenth_of_the_loop() -> None:
    """A preview costing 0.5 s (a big start's services) waits 5 s for the
    next one, not PREVIEW_INTERVAL: the lists the first apply waits for go on."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    observer = Observer(SimPlatform(), metrics=Metrics(process=False))
    dp = Dataplane(observer.platform, observer=observer)
    previews: list[float] = []

    class Costly:
        def on_update(self, msg: Message) -> None:
            pass

        def complete_deferred_work(self) -> None:
            previews.append(trio.current_time())
            clock.jump(0.5)

    dp.register_manager(Costly())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            for i in range(30):  # a message every second, never InSync
                dp.send_message(pb.IPSetUpdate(id=f"s:{i}", members=["10.65.0.10"]))
                await trio.sleep(1.0)
            before_close = list(previews)
            dp.close_input()
        gaps = [b - a for a, b in itertools.pairwise(before_close)]
        assert len(gaps) >= 3 and min(gaps) >= 5.0, gaps

    trio.run(main, clock=clock)
