"""What the benchmarks on the simulated HNS host share: timed steps of a running loop.

``bench_windows.py`` (endpoint ACLs) and ``bench_windows_services.py``
(load balancers) measure alike: messages go to a running
:class:`~dataplane.core.loop.Dataplane`, a step ends when the apply that
took them is done, and it costs the wall time and the HCN calls made in
between, by kind. The host counts the calls itself
(:class:`~dataplane.windows.sim.simhost.SimHost`), so the figures do not rest on
what the driver says about itself.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import trio
from google.protobuf.message import Message

from dataplane.core.loop import Dataplane
from dataplane.windows.sim.simhost import SimHost

__all__ = ["Step", "calls_text", "program", "step"]

# How often a waiting step looks at the loop: small beside a 20 ms HCN call.
_POLL = 0.002


@dataclass(frozen=True, slots=True)
class Step:
    """One measured step: its wall time and the HCN calls it made, by kind."""

    seconds: float = 0.0
    calls: Counter[str] = field(default_factory=Counter)


async def program(dp: Dataplane, host: SimHost, msgs: Iterable[Message]) -> Step:
    """A start-up snapshot (ending with InSync) in, until the loop sends DataplaneInSync."""
    before = Counter(host.calls)
    start = time.perf_counter()
    for m in msgs:
        dp.send_message(m)
    while not dp.in_sync:
        await trio.sleep(_POLL)
    return Step(time.perf_counter() - start, Counter(host.calls) - before)


async def step(dp: Dataplane, host: SimHost, *msgs: Message) -> Step:
    """``msgs`` into a settled loop, until the apply that takes them is done.

    Settled matters: an apply already running when they arrive would end
    the step without them.
    """
    before, applies = Counter(host.calls), dp.stats.applies
    start = time.perf_counter()
    for m in msgs:
        dp.send_message(m)
    while dp.stats.applies <= applies:
        await trio.sleep(_POLL)
    return Step(time.perf_counter() - start, Counter(host.calls) - before)


def calls_text(calls: Counter[str]) -> str:
    """``calls`` for a report: "CreateLoadBalancer 2,000, EnumerateEndpoints 1"."""
    return ", ".join(f"{kind} {n:,}" for kind, n in sorted(calls.items())) or "none"
