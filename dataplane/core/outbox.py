"""What the driver says back to Felix: numbered envelopes, in order.

Every ``FromDataplane`` the loop produces (endpoint statuses,
``DataplaneInSync``, the periodic ``ProcessStatusUpdate``) is numbered here
and queued without bound: the loop never waits on Felix to read. The
queue is drained by a sink (the pipe) or by an embedder's
``recv_message``; when the sink's peer goes away the loop is stopped.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from datetime import datetime

import trio
from google.protobuf.message import Message

from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.msgs import from_dataplane
from dataplane.wire.transport import MessageSink

__all__ = ["Outbox"]

log = logging.getLogger(__name__)


class Outbox:
    """The driver's outgoing envelopes, and the heartbeat among them."""

    def __init__(self, wall_clock: Callable[[], datetime]) -> None:
        self._wall_clock = wall_clock
        self._send, self._recv = trio.open_memory_channel[pb.FromDataplane](math.inf)
        self._seq = 0
        self._heartbeat_scope: trio.CancelScope | None = None

    def send(self, payload: Message) -> None:
        """Queue ``payload`` under the next sequence number; never blocks."""
        self._seq += 1
        self._send.send_nowait(from_dataplane(payload, self._seq))

    def close(self) -> None:
        """No more envelopes: a sink drains what is queued, then ends."""
        self._send.close()

    async def receive(self) -> pb.FromDataplane:
        """The next envelope; ``trio.EndOfChannel`` once closed and drained."""
        return await self._recv.receive()

    def drain(self) -> list[pb.FromDataplane]:
        """Every envelope queued now (for callers without a sink)."""
        out = []
        while True:
            try:
                out.append(self._recv.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                return out

    async def heartbeat(self, interval: Callable[[], float], started_at: float) -> None:
        """A ``ProcessStatusUpdate`` every ``interval()`` seconds (0: none),
        as Felix's own dataplane reports; runs until cancelled."""
        while True:
            seconds = interval()
            with trio.CancelScope() as scope:
                self._heartbeat_scope = scope
                if seconds <= 0:  # Felix: 0 disables status reports
                    await trio.sleep_forever()
                self.send(
                    pb.ProcessStatusUpdate(
                        iso_timestamp=self._wall_clock().isoformat(),
                        uptime=trio.current_time() - started_at,
                    )
                )
                await trio.sleep(seconds)

    def interval_changed(self) -> None:
        """The reporting interval changed: report now and then on the new one."""
        if self._heartbeat_scope is not None:
            self._heartbeat_scope.cancel()

    async def write_out(self, sink: MessageSink, stop: trio.CancelScope) -> None:
        """Hand every envelope to ``sink``; cancel ``stop`` if its peer left."""
        try:
            async for envelope in self._recv:
                await sink.send(envelope)
        except (BrokenPipeError, ConnectionResetError):
            log.info("output closed by the peer; stopping")
            stop.cancel()
