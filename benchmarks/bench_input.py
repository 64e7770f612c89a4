"""How long Felix's writes wait on the driver while it programs the kernel.

Plays Felix on the real pipes of a real driver process (``--platform linux``
in a fresh network namespace): the node's config, then a burst of
``--endpoints`` endpoint updates and InSync (which starts a large first
apply), then, as soon as the driver says it is programming, a second burst
changing every endpoint, written while that apply runs. Every frame is
one blocking ``write(2)``; the figure is the longest any of them waited,
beside the goal (50 ms). For scale it also
reports how long the driver took to finish after the last write: that is
how long a writer could have been stuck if input waited for phase 2.

The driver's status output and stderr are drained by the harness, as
Felix reads them. Needs root and ``ip``; the namespace is deleted at the
end.

Usage: python benchmarks/bench_input.py [--endpoints N] [--platform linux|sim]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine, percentile
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import encode_frame
from dataplane.wire.msgs import to_dataplane
from tests.felix_harness import FelixHarness

GOAL_MS = 50.0


def endpoint(index: int, profile: str) -> pb.WorkloadEndpointUpdate:
    return pb.WorkloadEndpointUpdate(
        id=pb.WorkloadEndpointID(
            orchestrator_id="k8s", workload_id=f"ns/pod-{index}", endpoint_id="eth0"
        ),
        endpoint=pb.WorkloadEndpoint(
            state="active",
            name=f"cali{index:011d}",
            profile_ids=[profile],
            ipv4_nets=[f"10.{64 + index // 65536}.{index // 256 % 256}.{index % 256}/32"],
        ),
    )


def profile(name: str) -> pb.ActiveProfileUpdate:
    rules = [pb.Rule(action="allow")]
    return pb.ActiveProfileUpdate(
        id=pb.ProfileID(name=name),
        profile=pb.Profile(inbound_rules=rules, outbound_rules=rules),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=int, default=5000)
    parser.add_argument("--platform", default="linux", choices=["linux", "sim"])
    args = parser.parse_args()
    netns = f"benchin-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        felix = FelixHarness("--platform", args.platform, netns=netns)
        felix.drain()
        seq = 0

        def frames(*payloads: object) -> list[bytes]:
            nonlocal seq
            out = []
            for payload in payloads:
                seq += 1
                out.append(encode_frame(to_dataplane(payload, seq)))  # type: ignore[arg-type]
            return out

        setup = frames(
            pb.ConfigUpdate(config={"Ipv6Support": "false", "InterfacePrefix": "cali"}),
            profile("kns.a"),
            profile("kns.b"),
        )
        first = frames(*(endpoint(i, "kns.a") for i in range(args.endpoints)), pb.InSync())
        second = frames(*(endpoint(i, "kns.b") for i in range(args.endpoints)))
        # Felix starts the driver and then writes; the driver's own start
        # (interpreter, imports) is not what this measures, so wait until
        # it is reading: the setup fits in the pipe, then it logs.
        for frame in setup:
            felix.send_raw(frame)
        deadline = time.monotonic() + 60
        while "starting, platform" not in felix.stderr_so_far():
            if time.monotonic() > deadline:
                raise SystemExit("the driver did not start")
            time.sleep(0.01)
        waits: list[float] = []

        def write(burst: list[bytes]) -> None:
            for frame in burst:
                before = time.perf_counter()
                felix.send_raw(frame)
                waits.append(time.perf_counter() - before)

        start = time.perf_counter()
        write(first)
        # The second burst goes in while the first apply runs.
        while "programming the dataplane" not in felix.stderr_so_far():
            if time.monotonic() > deadline:
                raise SystemExit("the driver did not start programming")
            time.sleep(0.01)
        write(second)
        written = time.perf_counter()
        felix.close_input()
        code, err = felix.wait(timeout=600)
        finished = time.perf_counter()
        if code != 0:
            raise SystemExit(f"driver exit {code}:\n{err[-2000:]}")
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)
    longest = max(waits) * 1000
    where = waits.index(max(waits))
    print(f"# input while applying: {args.endpoints} endpoints x2, --platform {args.platform}")
    print(f"# {machine()}")
    print(f"frames written:           {len(waits)} in {written - start:.2f} s")
    print(f"longest blocked write:    {longest:.1f} ms (goal < {GOAL_MS:.0f} ms, ratio")
    print(f"                          {longest / GOAL_MS:.2f} of the goal)")
    print(f"longest was frame:        {where} of {len(waits)}")
    print(f"p99 write:                {percentile(waits, 99) * 1000:.2f} ms")
    print(f"driver busy after writes: {finished - written:.2f} s (applies still running)")


if __name__ == "__main__":
    main()
