"""The main loop: two phases, batching, in-sync gating, retries, status.

::

    source ─▶ phase 1: every manager.on_update(payload)      cheap, in memory
              └ repeat while more envelopes are already waiting
            ▶ phase 2 (only once InSync has arrived, and only if dirty):
              every manager.complete_deferred_work()  → platform sinks
              platform.apply()                        → the only writes
              status out (endpoint status, DataplaneInSync once)

Invariants:

* Nothing is written to the dataplane before InSync, so the first write
  applies a complete snapshot.
* One apply per drained batch: a burst of any size costs one apply.
* A failed apply keeps its pending state (the platform holds it) and is
  retried with exponential backoff, while phase 1 keeps consuming input.
* An invalid message is rejected whole with one log line naming its
  sequence number, the field and the value; a malformed *stream* stops the
  driver (:class:`~dataplane.errors.ProtocolError`).

Beside it: :mod:`~dataplane.core.dispatch` routes phase 1's payloads,
:mod:`~dataplane.core.gate` says when the node may be programmed (and
previews before), :mod:`~dataplane.core.outbox` numbers what goes back.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import trio
from google.protobuf.message import Message

from dataplane.config import Config, parse_config
from dataplane.config_values import LOG_LEVELS
from dataplane.core.backoff import ApplyRetries, Backoff
from dataplane.core.dispatch import Dispatch
from dataplane.core.gate import Gate
from dataplane.core.heap import HeapFreezer
from dataplane.core.observer import LoopObserver, NullObserver
from dataplane.core.outbox import Outbox
from dataplane.core.platform import Platform
from dataplane.core.status import StatusReporter
from dataplane.errors import InputError, ProgrammingError, ProtocolError
from dataplane.managers import Manager
from dataplane.managers.roster import configure, standard
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.msgs import to_dataplane
from dataplane.wire.transport import MessageSink, MessageSource, QueueSource

__all__ = ["Dataplane", "LoopStats"]

log = logging.getLogger(__name__)

# Workload endpoints as accepted go to the status reporter: Felix's
# endpoint-status files are written from what its status updates carry.
_WORKLOAD_KINDS = frozenset({"workload_endpoint_update", "workload_endpoint_remove"})


@dataclass(slots=True)
class LoopStats:
    messages: int = 0
    batches: int = 0
    rejected: int = 0
    applies: int = 0
    apply_failures: int = 0


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Dataplane:
    """The driver's engine; also the embedding API.

    Embedding (from trio code)::

        dp = Dataplane(SimPlatform())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            dp.send_message(pb.InSync())
            reply = await dp.recv_message()   # FromDataplane envelope

    Args:
        platform: where desired state goes (``SimPlatform`` for in-memory).
        config: starting configuration (Felix's defaults if None); replaced
            by each valid ``ConfigUpdate``.
        backoff: retry schedule for failed applies.
        wall_clock: source of the timestamp in ``ProcessStatusUpdate``.
        follow_log_severity: let ``LogSeverityScreen`` set our log level.
        observer: told of every batch, rejection and apply (metrics, health,
            ``show``); see :mod:`dataplane.ops.observer`.
        heap: collects and freezes the heap after applies (the driver
            process; see :mod:`dataplane.core.heap`). An embedder's process
            is its own to tune: off by default.
    """

    def __init__(
        self,
        platform: Platform,
        *,
        config: Config | None = None,
        backoff: Backoff | None = None,
        wall_clock: Callable[[], datetime] = _utc_now,
        follow_log_severity: bool = False,
        observer: LoopObserver | None = None,
        heap: HeapFreezer | None = None,
    ) -> None:
        self.platform = platform
        self.observer: LoopObserver = observer or NullObserver()
        self._observed = observer is not None
        self.config = config or Config()
        self.platform.configure(self.config)
        self.backoff = backoff or Backoff()
        self.stats = LoopStats()
        self._follow_log_severity = follow_log_severity
        self._heap = heap
        roster = standard(platform)
        self.services = roster.services
        self.policy_index = roster.index
        self._managers = roster.managers
        self._dispatch = Dispatch(self._managers, self.observer)
        configure(self._managers, self.config)
        self._input = QueueSource()
        self._input_seq = 0
        self._outbox = Outbox(wall_clock)
        self._status = StatusReporter()
        self._gate = Gate(self.observer)
        self._sent_in_sync = False
        self._dirty = False
        self._retries = ApplyRetries(self.backoff)
        self._started_at = 0.0
        self._wait_scope: trio.CancelScope | None = None
        # For stop(): the scope around the message loop, whether a stop was
        # asked for, and whether platform.apply() is running (left True if a
        # stop cancelled it: see apply_abandoned).
        self._main_scope: trio.CancelScope | None = None
        self._stopping = False
        self._applying = False
        set_wakeup = getattr(platform, "set_wakeup", None)
        if set_wakeup is not None:
            set_wakeup(self._wake)

    # --- embedding API -------------------------------------------------------

    def register_manager(self, manager: Manager) -> None:
        """Add a manager; it sees every later message and takes part in applies.

        A manager may declare ``handles``, the payload types it acts on; it
        is then only called for those (an optimisation: every manager that
        does not declare it sees every message, as in Felix).
        """
        self._dispatch.add(manager)
        configure([manager], self.config)

    def managers_for(self, payload_type: type) -> tuple[Manager, ...]:
        """The registered managers a payload of ``payload_type`` reaches, in order."""
        return self._dispatch.managers_for(payload_type)

    def send_message(self, msg: Message) -> None:
        """Queue a payload (or a whole ``ToDataplane``) for the loop.

        Payloads are wrapped with the next input sequence number. Never
        blocks; safe to call before :meth:`run` starts.
        """
        if isinstance(msg, pb.ToDataplane):
            self._input_seq = msg.sequence_number
            self._input.put(msg)
        else:
            self._input_seq += 1
            self._input.put(to_dataplane(msg, self._input_seq))

    def add_source(
        self, name: str, run: Callable[[], Awaitable[None]], synced: Callable[[], bool]
    ) -> None:
        """Another source of desired state beside the messages (the Kubernetes API).

        ``run`` runs beside the loop for as long as it does; it calls
        :meth:`changed` when its managers have news. Nothing is programmed
        until ``synced()`` is true as well as Felix's InSync: the first
        apply writes a whole, consistent node (and a restart adopts the
        dataplane as it is until then).
        """
        self._gate.sources.append((name, run, synced))

    def changed(self) -> None:
        """A source's managers have work: apply at the next chance."""
        self._dirty = self._gate.unpreviewed = True
        self._wake()

    def close_input(self) -> None:
        """End of input for :meth:`run` without a source: it finishes and returns."""
        self._input.close()

    async def recv_message(self) -> pb.FromDataplane:
        """Next outgoing envelope; raises ``trio.EndOfChannel`` once stopped."""
        return await self._outbox.receive()

    def drain_output(self) -> list[pb.FromDataplane]:
        """Every outgoing envelope waiting now (for callers without a sink)."""
        return self._outbox.drain()

    @property
    def in_sync(self) -> bool:
        """True once DataplaneInSync has been sent."""
        return self._sent_in_sync

    @property
    def last_apply_error(self) -> str | None:
        """Why the last apply failed, while its state is still pending; else None."""
        return self._retries.last_error

    @property
    def apply_abandoned(self) -> bool:
        """True if :meth:`stop` cancelled an apply that had not finished."""
        return self._stopping and self._applying

    def stop(self, grace: float) -> None:
        """Make :meth:`run` return soon, leaving the dataplane as programmed.

        For SIGTERM (Felix stops its driver so, and SIGKILLs it 4 s later).
        Waiting for input, the loop stops at once. In phase 2, the apply in
        progress may finish if it does within ``grace`` seconds; after that
        it is cancelled, which is safe: each iptables-restore is atomic per
        table, and the next start reads back and adopts whatever is
        programmed. No further apply starts, and nothing is cleaned up.
        Call it from within the trio run; ``run`` must not be called again.
        """
        self._stopping = True
        scope = self._main_scope
        if scope is None:  # not running yet: run() will return at once
            return
        if self._applying:
            # A deadline, not a timer: the apply ends early if it can.
            scope.deadline = min(scope.deadline, trio.current_time() + grace)
        else:
            scope.cancel()

    # --- running ---------------------------------------------------------------

    async def run(
        self, source: MessageSource | None = None, sink: MessageSink | None = None
    ) -> None:
        """Run until end of input (or until the output pipe closes).

        Args:
            source: where envelopes come from; the embedding queue if None.
            sink: where outgoing envelopes go; if None they wait for
                :meth:`recv_message`.

        Raises:
            ProtocolError: the input stream was malformed.
        """
        self._started_at = trio.current_time()
        failure: ProtocolError | None = None
        async with trio.open_nursery() as outer:
            if sink is not None:
                outer.start_soon(self._outbox.write_out, sink, outer.cancel_scope)
            async with trio.open_nursery() as inner:
                inner.start_soon(
                    self._outbox.heartbeat, lambda: self.config.reporting_interval, self._started_at
                )
                if self._heap is not None:
                    inner.start_soon(self._heap.hold)
                inner.start_soon(self.platform.serve)
                for _name, run_source, _synced in self._gate.sources:
                    inner.start_soon(run_source)
                try:
                    with trio.CancelScope() as self._main_scope:  # stop() cancels it
                        await self._main(source or self._input)
                except ProtocolError as exc:
                    failure = exc
                inner.cancel_scope.cancel()
            # Let the writer drain what is queued (final status, InSync).
            self._outbox.close()
        if failure is not None:
            raise failure

    async def _main(self, source: MessageSource) -> None:
        while not self._stopping:  # stop() during an apply that then finished
            batch: list[pb.ToDataplane] | None = None
            with trio.CancelScope(deadline=self._wake_at()) as self._wait_scope:
                batch = await source.receive_batch()
            self._wait_scope = None
            if batch is None:
                # Woken by a timer or the platform: still take what is already
                # waiting first, so the apply includes it (a due timer would
                # otherwise cancel the receive before it read the queue).
                batch = source.poll() or None
            if batch is not None:
                if not batch:
                    await self._finish()
                    return
                self.observer.busy("decode")
                started = trio.current_time()
                self._phase1(batch)
                while more := source.poll():
                    self._phase1(more)
                self.observer.decoded(trio.current_time() - started)
            await self._maybe_apply()
            self.observer.idle()

    # --- phase 1 ---------------------------------------------------------------

    def _phase1(self, batch: list[pb.ToDataplane]) -> None:
        self.stats.batches += 1
        self.stats.messages += len(batch)
        debug = log.isEnabledFor(logging.DEBUG)
        if self._observed:
            self.observer.received(
                [str(e.WhichOneof("payload")) for e in batch], trio.current_time()
            )
        dispatch = self._dispatch
        routes, refused_kinds = dispatch.routes, dispatch.refused_kinds
        accepted = False
        for envelope in batch:
            kind = envelope.WhichOneof("payload")
            payload: Message = getattr(envelope, str(kind))
            if debug:
                log.debug("seq=%d received %s", envelope.sequence_number, kind)
            try:
                if kind == "config_update":
                    self._on_config(payload, envelope.sequence_number)  # type: ignore[arg-type]
                elif kind == "in_sync":
                    self._on_in_sync(envelope.sequence_number)
                managers = routes.get(type(payload))
                if managers is None:
                    managers = dispatch.route(envelope.sequence_number, str(kind), type(payload))
                for manager in managers:
                    manager.on_update(payload)
                if kind in refused_kinds:
                    dispatch.refuse_fields(envelope.sequence_number, kind, payload)
                if kind in _WORKLOAD_KINDS:  # accepted: its status will carry it
                    self._status.record(payload)  # type: ignore[arg-type]
            except InputError as exc:
                self.stats.rejected += 1
                self.observer.rejected(str(kind))
                seq, name = envelope.sequence_number, type(payload).__name__
                log.error("seq=%d %s rejected: %s", seq, name, exc)
                continue
            accepted = True
        if accepted:
            self._dirty = self._gate.unpreviewed = True

    def _on_in_sync(self, seq: int) -> None:
        if not self._gate.in_sync:
            log.info("seq=%d InSync received; programming the dataplane", seq)
            self.observer.in_sync_received()
        self._gate.in_sync = True

    def _on_config(self, update: pb.ConfigUpdate, seq: int) -> None:
        config = parse_config(update.config, self.config)
        if config == self.config:
            return
        old, self.config = self.config, config
        for refused in config.refused:
            if refused not in old.refused:  # once, when it arrives
                log.warning("seq=%d %s", seq, refused.line())
        self.platform.configure(config)
        configure(self._managers, config)
        log.info("config updated (%d keys received)", len(update.config))
        if self._follow_log_severity:
            logging.getLogger("dataplane").setLevel(LOG_LEVELS[config.log_severity])
        if config.reporting_interval != old.reporting_interval:
            self._outbox.interval_changed()

    # --- phase 2 ---------------------------------------------------------------

    def _wake(self) -> None:
        """Stop waiting for input: the platform has work (e.g. a link changed)."""
        if self._wait_scope is not None:
            self._wait_scope.cancel()

    def _wake_at(self) -> float:
        """When the loop must run phase 2 even if no input arrives."""
        if not self._gate.may_program():
            return self._gate.preview_at()
        if self._retries.retry_at is not None:
            return self._retries.retry_at
        if self._dirty:
            # A source's news came while no wait was open to cancel (during
            # an apply): messages wait in the queue, a source's change only
            # in this flag, so the wait must not outlast it.
            return -math.inf
        return self.platform.wants_apply_at()

    async def _maybe_apply(self) -> None:
        if not self._gate.may_program():
            self._gate.maybe_preview(self._managers)
            return
        now = trio.current_time()
        if self._retries.retry_at is not None:
            if now < self._retries.retry_at:
                return
        elif not self._dirty and self.platform.wants_apply_at() > now:
            return
        await self._apply()

    async def _apply(self) -> None:
        self.observer.busy("apply")
        started = trio.current_time()
        for manager in self._managers:
            manager.complete_deferred_work()
        self._dirty = False
        self._applying = True
        completed = trio.current_time()
        try:
            await self.platform.apply()
        except (ProgrammingError, OSError) as exc:
            self._applying = False
            now = trio.current_time()
            self.observer.applied(str(exc), completed - started, now - completed, now)
            self.stats.apply_failures += 1
            self._retries.failed(str(exc), trio.current_time())  # (logs the retry)
            return
        # Not in a finally: if stop() cancels the apply, it stays True.
        self._applying = False
        now = trio.current_time()
        self.observer.applied(None, completed - started, now - completed, now)
        self._retries.succeeded()
        self.stats.applies += 1
        for payload in self._status.changes(self.platform.endpoint_statuses()):
            self._outbox.send(payload)
        if not self._sent_in_sync:
            self._sent_in_sync = True
            self._outbox.send(pb.DataplaneInSync())
            log.info("dataplane programmed from a complete snapshot")
        # After the news has gone out (the writer runs at this checkpoint):
        # the kernel holds it whether or not the heap is tidy yet.
        if self._heap is not None:
            await trio.lowlevel.checkpoint()
            self._heap.after_apply()

    async def _finish(self) -> None:
        log.info("end of input after %d messages; stopping", self.stats.messages)
        if self._gate.may_program() and (self._dirty or self._retries.retry_at is not None):
            # One last attempt so that a replayed log ends fully applied; a
            # failure here is logged and the dataplane left as it is.
            await self._apply()
        elif not self._gate.may_program():
            # A log cut before InSync: show what it held.
            self._gate.maybe_preview(self._managers, final=True)
