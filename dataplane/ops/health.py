"""Liveness and readiness, as kube-proxy and Felix report them.

Felix registers no health check for an external driver: a hung driver
leaves calico-node live and ready. So the driver answers for itself.

* **Live** while the main loop is not stuck: it is either waiting for
  input (idle is healthy, however long) or has been busy for no longer
  than the deadline. A kernel tool or HNS call that hangs keeps the loop
  busy, so it shows here within the deadline (kube-proxy's ``/livez``
  goes 503 the same way once a queued change has waited too long).
* **Ready** only when the dataplane is programmed from a complete
  snapshot (InSync received and applied), the last apply succeeded, and
  nothing has been held in quarantine for longer than the grace period
  (0 by default: a refused object makes the node unready at once).

Both answers carry a small component table naming each check and why,
like Felix's health report. The main loop writes; the HTTP thread reads:
every write replaces one immutable value, so a reader never sees half an
update and never waits for the loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

__all__ = ["DEFAULT_LIVENESS_DEADLINE", "Check", "Health", "Report"]

DEFAULT_LIVENESS_DEADLINE = 60.0


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Report:
    """One answer: 200 when every check is ok, else 503."""

    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def status(self) -> int:
        return 200 if self.ok else 503

    def to_json(self) -> dict[str, object]:
        return {"status": "ok" if self.ok else "fail", "checks": [c.to_json() for c in self.checks]}


@dataclass(frozen=True, slots=True)
class _State:
    # Monotonic time the loop became busy, None while it waits for input.
    busy_since: float | None = None
    busy_with: str = ""
    in_sync_received: bool = False
    programmed: bool = False
    apply_error: str | None = None
    # (kind, id) -> (reason, monotonic time first seen in quarantine)
    quarantined: Mapping[tuple[str, str], tuple[str, float]] = field(default_factory=dict)


class Health:
    """The loop's health, written by the loop and read by any thread.

    Args:
        liveness_deadline: seconds the loop may stay busy before it is not live.
        quarantine_grace: seconds an object may stay refused before the node
            is not ready (0: at once).
        clock: monotonic seconds (injected for tests).
    """

    def __init__(
        self,
        *,
        liveness_deadline: float = DEFAULT_LIVENESS_DEADLINE,
        quarantine_grace: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.liveness_deadline = liveness_deadline
        self.quarantine_grace = quarantine_grace
        self._clock = clock
        self._state = _State()
        self._checks: list[Callable[[float], Check]] = []

    def add_check(self, check: Callable[[float], Check]) -> None:
        """One more readiness check, evaluated per request with the clock's now.

        For a source beside the messages (the Kubernetes API): it reads only
        values its owner replaces whole, so the HTTP thread may call it.
        """
        self._checks.append(check)

    # --- written by the main loop -------------------------------------------------

    def busy(self, what: str) -> None:
        """The loop starts work (a batch, an apply); it is stuck if this lasts too long."""
        if self._state.busy_since is None:
            self._state = replace(self._state, busy_since=self._clock(), busy_with=what)
        elif what != self._state.busy_with:
            self._state = replace(self._state, busy_with=what)

    def idle(self) -> None:
        """The loop waits for input again."""
        if self._state.busy_since is not None:
            self._state = replace(self._state, busy_since=None, busy_with="")

    def in_sync_received(self) -> None:
        self._state = replace(self._state, in_sync_received=True)

    def applied(self, error: str | None, quarantined: Mapping[tuple[str, str], str]) -> None:
        """An apply ended: its error (None: it succeeded) and what is refused now."""
        now = self._clock()
        previous = self._state.quarantined
        held = {
            key: (reason, previous[key][1] if key in previous else now)
            for key, reason in quarantined.items()
        }
        self._state = replace(
            self._state,
            programmed=self._state.programmed or error is None,
            apply_error=error,
            quarantined=held,
        )

    # --- read by the HTTP thread ----------------------------------------------------

    def liveness(self) -> Report:
        state, now = self._state, self._clock()
        if state.busy_since is None:
            loop = Check("main-loop", True, "waiting for input")
        else:
            busy = now - state.busy_since
            ok = busy <= self.liveness_deadline
            loop = Check(
                "main-loop",
                ok,
                f"busy {state.busy_with} for {busy:.1f}s"
                + ("" if ok else f", over the liveness deadline of {self.liveness_deadline:g}s"),
            )
        return Report((loop,))

    def readiness(self) -> Report:
        state, now = self._state, self._clock()
        if not state.in_sync_received:
            sync = Check("in-sync", False, "waiting for InSync from the calculation graph")
        elif not state.programmed:
            sync = Check("in-sync", False, "InSync received; the first apply has not succeeded")
        else:
            sync = Check("in-sync", True, "programmed from a complete snapshot")
        if state.apply_error is None:
            apply = Check("last-apply", True, "succeeded" if state.programmed else "none yet")
        else:
            apply = Check("last-apply", False, f"failed, retrying: {state.apply_error}")
        overdue = sorted(
            (key, reason)
            for key, (reason, since) in state.quarantined.items()
            if now - since >= self.quarantine_grace
        )
        if overdue:
            (kind, name), reason = overdue[0]
            more = f" (and {len(overdue) - 1} more)" if len(overdue) > 1 else ""
            quarantine = Check("quarantine", False, f"{kind} {name} refused: {reason}{more}")
        elif state.quarantined:
            quarantine = Check(
                "quarantine",
                True,
                f"{len(state.quarantined)} object(s) refused, within the grace period of"
                f" {self.quarantine_grace:g}s",
            )
        else:
            quarantine = Check("quarantine", True, "nothing refused")
        return Report((sync, apply, quarantine, *(check(now) for check in self._checks)))
