"""The Windows platform on a simulated host, driven by the real loop and managers."""

from __future__ import annotations

import trio
import trio.testing
from google.protobuf.message import Message

from dataplane.core.loop import Dataplane
from dataplane.windows.hcn import HnsVersion
from dataplane.windows.platform import WindowsPlatform
from dataplane.windows.simhost import SimHost
from testbed.hns import calico_host
from tests.conftest import run_trio
from tests.kernel import scenario as sc
from tests.windows.windows_node import Model, disagreements, inline, messages

OLD, NEW = HnsVersion(12, 0), HnsVersion(15, 4)


def drive(host: SimHost, *batches: list[Message], **options: object) -> WindowsPlatform:
    """Each batch to a fresh loop's platform in turn, settling after each."""
    platform = WindowsPlatform(host, offload=inline, **options)  # type: ignore[arg-type]

    async def main() -> None:
        dp = Dataplane(platform)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            for batch in batches:
                for msg in batch:
                    dp.send_message(msg)
                await trio.testing.wait_all_tasks_blocked()
            dp.close_input()

    run_trio(main)
    return platform


def test_policy_matrix_verdicts_on_an_old_and_a_new_host() -> None:
    msgs = messages()
    for version in (OLD, NEW):
        host = calico_host(sc.PODS, version)
        platform = drive(host, msgs)
        assert disagreements(host.snapshot(), Model.of(msgs)) == [], version
        calls = host.calls
        # One enumerate each, one ModifyEndpoint per pod, sets only where HNS has them.
        assert calls["ModifyEndpoint"] == len(sc.PODS)
        assert calls["EnumerateEndpoints"] == 1
        assert calls["ModifyNetwork"] == (0 if version == OLD else 1)
        assert "fails closed: 1 rule(s)" in platform.dump()
