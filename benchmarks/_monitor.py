"""A reader of a namespace's nf_tables commits, for the benchmarks' change latencies."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from testbed.topology import Namespace

__all__ = ["Monitor"]

EVENTS = Path(__file__).resolve().parent / "_nft_events.py"


class Monitor:
    """Every nf_tables commit in a namespace naming an awaited token (an IPv4
    address or an interface name), timestamped on arrival
    (``benchmarks/_nft_events.py``: the raw notifications, not ``nft monitor``,
    whose userspace copy of the ruleset lags minutes behind at 20,000)."""

    def __init__(self, ns: Namespace) -> None:
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns.netns, sys.executable, str(EVENTS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "listening":
            raise RuntimeError("the nf_tables event reader did not start")
        self.seen: dict[str, float] = {}
        self.overruns: list[float] = []  # when the reader's socket dropped notifications
        self._lock = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            token, _, at = line.partition(" ")
            with self._lock:
                if token == "overrun":
                    self.overruns.append(float(at))
                else:
                    self.seen[token] = float(at)
                self._lock.notify_all()

    def expect(self, token: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{token}\n")
        self.proc.stdin.flush()

    def wait(self, token: str, deadline: float) -> float | None:
        with self._lock:
            while token not in self.seen:
                left = deadline - time.monotonic()
                if left <= 0 or not self._lock.wait(left):
                    return self.seen.get(token)
            return self.seen[token]

    def stop(self) -> None:
        self.proc.kill()
