"""The simulated Windows host's file at 1,000 endpoints, through the command line.

What a user runs to try the Windows platform without Windows:
``dataplane-driver --platform windows --hns-fake HOST.json replay NODE.log``.
The host file holds the Calico network and one local endpoint per
workload, as the CNI leaves them (written once, before timing); the log is
the generated node of ``benchmarks/_node.py`` (``--endpoints`` workloads,
``--policies`` policies, ``--sets`` IP sets of ``--members`` members). Each
HCN call is one access to the shared file: the ``flock``, a re-read if
another process wrote it, and a rewrite when it changed something
(``dataplane/windows/sim/simhost_file.py``). Measured, each in a process of
its own:

1. **sync**: the replay onto the CNI's host, from the process start to its
   exit (everything programmed, the file written);
2. **restart**: the same replay again onto the host the first left
   (every endpoint read back and found as wanted);

beside each run's HCN calls (the file's ``Calls``) and the file's size.
The floor is the same calls on the in-memory host (``--hns-fake`` unset:
the calls' own work, no file). Goal (issue 40): sync <= 30 s at 1,000
endpoints.

Usage: python benchmarks/bench_windows_file.py [--endpoints N] [--policies N]
       [--sets N] [--members N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trio
from google.protobuf.message import Message

from benchmarks._common import machine, markdown_table
from benchmarks._hns import program
from benchmarks._node import NodeBuilder, Sizes
from dataplane.core.loop import Dataplane
from dataplane.windows.platform import WindowsPlatform
from dataplane.windows.sim.simhost import SimHost
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.msglog import build_log
from testbed.hns import NETWORK_ID, calico_host

DRIVER = Path(sys.executable).with_name("dataplane-driver")


def cni_host(msgs: list[Message]) -> SimHost:
    """The host in memory as the CNI leaves it for the node of ``msgs``."""
    host = calico_host([])
    for m in msgs:
        if isinstance(m, pb.WorkloadEndpointUpdate):
            nets = [*m.endpoint.ipv4_nets, *m.endpoint.ipv6_nets]
            host.add_local_endpoint(
                NETWORK_ID,
                {
                    "Name": m.id.workload_id.replace("/", "_"),
                    "IpConfigurations": [{"IpAddress": n.split("/")[0]} for n in nets],
                },
            )
    return host


def replay(log: Path, host: Path) -> float:
    argv = [str(DRIVER), "--platform", "windows", "--log-level", "warning", "--hns-fake"]
    started = time.monotonic()
    subprocess.run([*argv, str(host), "replay", str(log)], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def in_memory(msgs: list[Message]) -> tuple[float, int]:
    """The floor: the same messages programmed in this process on the in-memory
    host (seconds, HCN calls): the calls' own work without the file."""
    host = cni_host(msgs)
    dp = Dataplane(WindowsPlatform(host))

    async def main() -> float:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            seconds = (await program(dp, host, msgs)).seconds
            dp.close_input()
        return seconds

    seconds = trio.run(main)
    return seconds, sum(host.calls.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--policies", type=int, default=2)
    parser.add_argument("--sets", type=int, default=4)
    parser.add_argument("--members", type=int, default=100)
    args = parser.parse_args()
    sizes = Sizes(args.endpoints, args.policies, args.sets, args.members, spare=0)
    with tempfile.TemporaryDirectory(prefix="bench-windows-file-") as tmp:
        work = Path(tmp)
        host, log = work / "host.json", work / "node.log"
        msgs = NodeBuilder(sizes, "legacy").snapshot()
        saved = cni_host(msgs).snapshot()  # written once: the CNI's work is not measured
        saved["Calls"] = {}
        host.write_text(json.dumps(saved))
        log.write_bytes(build_log(msgs))
        rows = []
        for what in ("sync", "restart"):
            seconds = replay(log, host)
            calls = Counter(json.loads(host.read_text())["Calls"])
            rows.append([what, f"{seconds:.1f} s", f"{sum(calls.values()):,}"])
        size = host.stat().st_size
    floor, floor_calls = in_memory(msgs)
    print(
        f"{args.endpoints} endpoints, {args.policies} policies, {args.sets} IP sets /"
        f" {args.members} members; host file {size / 1e6:.1f} MB; {machine()}"
    )
    print(markdown_table(["run", "seconds", "HCN calls (the file's, cumulative)"], rows))
    print(
        f"floor: the same sync in one process on the in-memory host, {floor:.1f} s"
        f" ({floor_calls:,} HCN calls)"
    )
    print("goal: sync <= 30 s")


if __name__ == "__main__":
    main()
