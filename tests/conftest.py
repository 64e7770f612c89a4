"""Shared test helpers.

Trio tests run under ``trio.testing.MockClock(autojump_threshold=0)``: time
jumps straight to the next deadline whenever every task is blocked, so
backoff and heartbeat tests take no wall-clock time and never sleep.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import trio
import trio.testing

from dataplane.wire._pb import felixbackend_pb2 as pb

REPO = Path(__file__).resolve().parent.parent


def run_trio(fn: Callable[[], Awaitable[object]]) -> None:
    """Run ``fn`` under a mock clock that autojumps when all tasks block."""
    trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))


def ipset(set_id: str, *members: str, kind: int = pb.IPSetUpdate.IP) -> pb.IPSetUpdate:
    return pb.IPSetUpdate(id=set_id, members=list(members), type=kind)  # type: ignore[arg-type]


def workload(name: str, iface: str, *nets: str, state: str = "active") -> pb.WorkloadEndpointUpdate:
    return pb.WorkloadEndpointUpdate(
        id=pb.WorkloadEndpointID(orchestrator_id="k8s", workload_id=name, endpoint_id="eth0"),
        endpoint=pb.WorkloadEndpoint(state=state, name=iface, ipv4_nets=list(nets)),
    )
