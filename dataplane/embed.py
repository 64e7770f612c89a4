"""Embedding the dataplane in a program that is not async.

:class:`ThreadedDataplane` runs a :class:`~dataplane.core.loop.Dataplane` on its
own trio loop in a background thread and exposes blocking ``send_message``
and ``recv_message``::

    with ThreadedDataplane(Dataplane(SimPlatform())) as dp:
        dp.send_message(pb.InSync())
        reply = dp.recv_message(timeout=5)

Leaving the ``with`` block closes the input; the loop finishes the work it
has (a last apply if needed) and the thread ends.
"""

from __future__ import annotations

import queue
import threading
from types import TracebackType

import trio
from google.protobuf.message import Message

from dataplane.core.loop import Dataplane
from dataplane.wire._pb import felixbackend_pb2 as pb

__all__ = ["ThreadedDataplane"]


class ThreadedDataplane:
    def __init__(self, dataplane: Dataplane) -> None:
        self.dataplane = dataplane
        self._out: queue.Queue[pb.FromDataplane | None] = queue.Queue()
        self._token: trio.lowlevel.TrioToken | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._thread_main, name="dataplane", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def _thread_main(self) -> None:
        try:
            trio.run(self._run)
        except BaseException as exc:  # handed to the caller in close()
            self._error = exc
            self._started.set()
        finally:
            self._out.put(None)

    async def _run(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.dataplane.run)
            self._started.set()
            while True:
                try:
                    envelope = await self.dataplane.recv_message()
                except trio.EndOfChannel:
                    return
                self._out.put(envelope)

    def send_message(self, msg: Message) -> None:
        """Queue one payload or envelope for the loop (thread-safe)."""
        assert self._token is not None, "start() first"
        trio.from_thread.run_sync(self.dataplane.send_message, msg, trio_token=self._token)

    def recv_message(self, timeout: float | None = None) -> pb.FromDataplane | None:
        """Next outgoing envelope, or None once the dataplane has stopped.

        Raises:
            queue.Empty: nothing arrived within ``timeout`` seconds.
        """
        envelope = self._out.get(timeout=timeout)
        if envelope is None:
            self._out.put(None)  # keep reporting "stopped" to later calls
        return envelope

    def close(self) -> None:
        """Close the input and wait for the loop to finish."""
        if self._token is not None and self._thread.is_alive():
            trio.from_thread.run_sync(self.dataplane.close_input, trio_token=self._token)
        self._thread.join()
        if self._error is not None:
            raise self._error

    def __enter__(self) -> ThreadedDataplane:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
