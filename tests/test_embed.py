"""Embedding from a program that is not async."""

from __future__ import annotations

from dataplane.core.loop import Dataplane
from dataplane.embed import ThreadedDataplane
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.conftest import ipset


def test_threaded_dataplane_round_trip() -> None:
    platform = SimPlatform()
    with ThreadedDataplane(Dataplane(platform)) as dp:
        dp.send_message(ipset("s:a", "10.0.0.1"))
        dp.send_message(pb.InSync())
        kinds = []
        while "dataplane_in_sync" not in kinds:
            envelope = dp.recv_message(timeout=30)
            assert envelope is not None
            kinds.append(envelope.WhichOneof("payload"))
    assert platform.programmed.ipsets["s:a"].members == {"10.0.0.1"}
    # Once stopped, whatever was still queued drains and then None says so.
    while dp.recv_message(timeout=30) is not None:
        pass
    assert dp.recv_message(timeout=30) is None
