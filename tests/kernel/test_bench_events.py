"""The services benchmark's reader of nf_tables notifications (benchmarks/_nft_events.py).

Its timestamps are every *one change* figure of ``bench_kube_proxy.py``;
an address it misses is counted against the peer. The address is asked
for before the write that brings it, but the reader's stdin thread may
take it after the peer's commit on a loaded machine.
"""

from __future__ import annotations

import select
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed.topology import Topology
from tests.kernel.marks import requires_root

pytestmark = [requires_root, pytest.mark.own_backend]

READER = Path(__file__).resolve().parents[2] / "benchmarks" / "_nft_events.py"


def _line(proc: subprocess.Popen[str], within: float = 10.0) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], within)
    assert ready, "the reader printed nothing"
    return proc.stdout.readline().strip()


@dataclass
class Reader:
    proc: subprocess.Popen[str]
    netns: str

    def nft(self, script: str) -> None:
        subprocess.run(["ip", "netns", "exec", self.netns, "nft", script], check=True)

    def ask(self, *tokens: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("".join(f"{t}\n" for t in tokens))
        self.proc.stdin.flush()

    def line(self) -> str:
        return _line(self.proc)


@pytest.fixture
def reader(topology: Topology) -> Iterator[Reader]:
    """The reader, listening in a namespace of its own."""
    netns = topology.new_netns("evt")
    argv = ["ip", "netns", "exec", netns, sys.executable, str(READER)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert _line(proc) == "listening"
        yield Reader(proc, netns)
    finally:
        proc.kill()
        proc.wait()


def test_an_address_asked_for_after_its_commit_is_found_with_the_commits_time(
    reader: Reader,
) -> None:
    reader.nft(
        "add table ip t; add set ip t s { type ipv4_addr; }; add element ip t s { 10.64.1.2 }"
    )
    committed = time.monotonic()
    reader.ask("10.64.1.2")  # asked for late, as a loaded machine may
    address, at = reader.line().split()
    assert address == "10.64.1.2" and float(at) <= committed
    # Asked for in time: printed when its commit comes, and only that one.
    reader.ask("10.64.1.3", "10.64.1.4")
    reader.nft("add element ip t s { 10.64.1.3 }")
    assert reader.line().split()[0] == "10.64.1.3"
    reader.nft("add element ip t s { 10.64.1.4 }")
    assert reader.line().split()[0] == "10.64.1.4"


def test_an_interface_name_is_found_in_the_commit_that_names_it(reader: Reader) -> None:
    # The real-Felix benchmark waits for a new pod's interface: in a chain's
    # name, a rule's iifname or a map's key, whichever the backend writes.
    reader.ask("cali0123456789a", "calibbbbbbbbbbb")
    reader.nft("add table ip t; add chain ip t c; add rule ip t c iifname calibbbbbbbbbbb accept")
    assert reader.line().split()[0] == "calibbbbbbbbbbb"
    reader.nft("add chain ip t cali-tw-cali0123456789a")
    assert reader.line().split()[0] == "cali0123456789a"
