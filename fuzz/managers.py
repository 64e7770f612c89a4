"""Target ``managers``: decoded, mutated envelopes through the real loop on the sim platform.

Inputs are the structured targets' header + frame streams. The frames are
decoded as the driver decodes them (a ProtocolError ends the stream there,
as it ends the driver); sequence numbers are renumbered 1, 2, ... so that a
log line names one message; an InSync is put where byte 2 says if there
is none. The envelopes go to :class:`~dataplane.core.loop.Dataplane` on a
:class:`~dataplane.sim.SimPlatform`, in batches of the size byte 1 says, so
phase 1 (every manager's ``on_update``) and, after InSync, phase 2 (every
``complete_deferred_work`` and the sim's ``apply``) alternate. Checked:

* ``run`` raises nothing: :class:`~dataplane.errors.InputError`, the only
  rejection, is caught by the loop; anything else escaping a manager or
  phase 2 is a finding, its traceback the report;
* each rejection is logged as one line, ``seq=N <Type> rejected: field
  <path>=<value>: <reason>``, one per rejected message; every log line is
  one line;
* the sim's apply never fails, and DataplaneInSync goes out once InSync
  has come;
* a rejection changes nothing: the same batches without the rejected
  messages program exactly the same state, and reject nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import trio

from dataplane.core.loop import Dataplane
from dataplane.errors import ProtocolError
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder
from dataplane.wire.releases import Release
from fuzz.common import Finding, LogCapture, frame_pieces, split_header
from fuzz.known import leaves

__all__ = ["test_one_input"]

_REJECTED = re.compile(r"seq=(\d+) (\w+) rejected: field ([^=\s]+)=(.*): (.+)")
_LOGS = LogCapture.install()


class _Batches:
    """A MessageSource handing out fixed batches, one per receive."""

    def __init__(self, batches: Sequence[list[pb.ToDataplane]]) -> None:
        self._batches = list(batches)
        self._next = 0

    async def receive_batch(self) -> list[pb.ToDataplane]:
        await trio.lowlevel.checkpoint()
        if self._next == len(self._batches):
            return []
        self._next += 1
        return self._batches[self._next - 1]

    def poll(self) -> list[pb.ToDataplane]:
        return []


def _decoded(stream: bytes, release: Release | None) -> list[pb.ToDataplane]:
    """The envelopes the driver would act on: up to the first bad frame."""
    decoder = FrameDecoder(release=release)
    out: list[pb.ToDataplane] = []
    try:
        for piece in frame_pieces(stream, DEFAULT_MAX_FRAME_BYTES):
            out += decoder.feed(piece)
    except ProtocolError:
        pass
    return out


def _run(batches: list[list[pb.ToDataplane]]) -> tuple[Dataplane, SimPlatform, set[int]]:
    """Run the loop over ``batches``; the state, and the seqs it rejected."""
    platform = SimPlatform()
    dp = Dataplane(platform)
    leaf: BaseException | None = None
    try:
        trio.run(dp.run, _Batches([b for b in batches if b]))
    except BaseExceptionGroup as group:  # trio's nurseries wrap what escapes
        found = leaves(group)
        if len(found) != 1:
            raise
        leaf = found[0]
    if leaf is not None:  # raised out here to keep its own traceback and context
        raise leaf
    rejected: set[int] = set()
    for record in _LOGS.take():
        text = record.getMessage()
        if " rejected: " not in text:
            continue
        match = _REJECTED.fullmatch(text)
        if match is None:
            raise Finding(f"rejection not logged as 'seq=N <Type> rejected: field ...': {text!r}")
        seq = int(match[1])
        if seq in rejected:
            raise Finding(f"seq={seq} rejected twice: {text!r}")
        rejected.add(seq)
    if len(rejected) != dp.stats.rejected:
        raise Finding(f"{dp.stats.rejected} rejections counted, {len(rejected)} logged")
    if dp.stats.apply_failures:
        raise Finding(f"the sim's apply failed: {dp.last_apply_error}")
    for envelope in dp.drain_output():
        envelope.SerializeToString()
    return dp, platform, rejected


def test_one_input(data: bytes) -> None:
    _LOGS.reset()
    head, stream = split_header(data)
    envelopes = _decoded(stream, head.release)
    if not any(e.WhichOneof("payload") == "in_sync" for e in envelopes):
        envelopes.insert(head.a % (len(envelopes) + 1), pb.ToDataplane(in_sync=pb.InSync()))
    for seq, envelope in enumerate(envelopes, start=1):
        envelope.sequence_number = seq
    size = head.knob % 8 or len(envelopes)
    batches = [envelopes[i : i + size] for i in range(0, len(envelopes), size)]
    dp, platform, rejected = _run(batches)
    if not dp.in_sync:
        raise Finding("InSync came and the sim applied without failure, but no DataplaneInSync")
    if not rejected:
        return
    kept = [[e for e in b if e.sequence_number not in rejected] for b in batches]
    _, platform_again, rejected_again = _run(kept)
    if rejected_again:
        raise Finding(
            f"without the rejected seqs {sorted(rejected)}, seqs {sorted(rejected_again)}"
            " are rejected: a rejected message changed state"
        )
    if platform_again.dump() != platform.dump():
        raise Finding(
            f"without the rejected seqs {sorted(rejected)} the programmed state differs:"
            " a rejected message changed state"
        )
