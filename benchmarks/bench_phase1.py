"""Messages per second through decode + phase 1 (goal: >= 100,000/s).

Builds a realistic steady-state stream (what Felix sends once a node is
running: IP set deltas as pods come and go, endpoint updates, policy
updates, IP set full updates), frames it as on the wire, then times
``FrameDecoder.feed`` + every manager's ``on_update`` for the whole stream
in one batch, exactly as the loop's phase 1 runs it. The apply is not
included (it is the platform's cost, measured by the platform benchmarks).

Usage: python benchmarks/bench_phase1.py [--messages N] [--repeat R]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

from google.protobuf.message import Message

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dataplane.core.loop import Dataplane
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import FrameDecoder
from dataplane.wire.msglog import build_log


def _ip(i: int) -> str:
    return f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"


def stream(n: int, seed: int = 1) -> list[Message]:
    """``n`` messages in Felix's steady-state mix."""
    rng = random.Random(seed)
    sets = [f"s:set{i:04d}" for i in range(200)]
    msgs: list[Message] = [pb.IPSetUpdate(id=s, members=[_ip(i)]) for i, s in enumerate(sets)]

    def rules(policy: int) -> list[pb.Rule]:
        # 200 policies x 5 distinct rules; re-sent policies repeat theirs.
        return [
            pb.Rule(
                action="allow",
                protocol=pb.Protocol(name="tcp"),
                src_ip_set_ids=[sets[(policy + k) % len(sets)]],
                dst_ports=[pb.PortRange(first=8000 + k, last=8000 + k)],
            )
            for k in range(5)
        ]

    tiers = [pb.TierInfo(name="default", ingress_policies=[pb.PolicyID(name="p1", namespace="ns")])]
    while len(msgs) < n:
        i = len(msgs)
        roll = rng.random()
        if roll < 0.70:  # pods churn: members move in and out of selector sets
            msgs.append(
                pb.IPSetDeltaUpdate(
                    id=rng.choice(sets), added_members=[_ip(i)], removed_members=[_ip(i - 7)]
                )
            )
        elif roll < 0.90:
            msgs.append(
                pb.WorkloadEndpointUpdate(
                    id=pb.WorkloadEndpointID(
                        orchestrator_id="k8s", workload_id=f"ns/pod-{i % 1000}", endpoint_id="eth0"
                    ),
                    endpoint=pb.WorkloadEndpoint(
                        state="active",
                        name=f"cali{i % 1000:011d}",
                        ipv4_nets=[f"{_ip(i)}/32"],
                        profile_ids=["kns.ns"],
                        tiers=tiers,
                    ),
                )
            )
        elif roll < 0.97:
            msgs.append(
                pb.ActivePolicyUpdate(
                    id=pb.PolicyID(name=f"p{i % 200}", namespace="ns"),
                    policy=pb.Policy(tier="default", inbound_rules=rules(i % 200)),
                )
            )
        else:
            msgs.append(
                pb.IPSetUpdate(id=rng.choice(sets), members=[_ip(i + k) for k in range(20)])
            )
    return msgs[:n]


def run_once(data: bytes) -> tuple[float, int]:
    dp = Dataplane(SimPlatform())
    decoder = FrameDecoder()
    start = time.perf_counter()
    batch = decoder.feed(data)
    dp._phase1(batch)
    elapsed = time.perf_counter() - start
    return elapsed, dp.stats.rejected


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    data = build_log(stream(args.messages))
    rates = []
    for _ in range(args.repeat):
        elapsed, rejected = run_once(data)
        assert rejected == 0
        rates.append(args.messages / elapsed)
    print(
        f"decode + phase 1: {args.messages} messages ({len(data) / 1e6:.1f} MB),"
        f" median {statistics.median(rates):,.0f} msg/s"
        f" (min {min(rates):,.0f}, max {max(rates):,.0f}, {args.repeat} runs)"
    )


if __name__ == "__main__":
    main()
