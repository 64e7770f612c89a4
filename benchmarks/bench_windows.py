"""The Windows platform on a simulated HNS host with a realistic per-call latency.

The generated node of ``bench_linux.py`` (``benchmarks/_node.py``: 1,000
endpoints, 200 policies x 10 rules in 2 tiers with pass and negations, here
500 IP sets with 50,000 members), on a host whose every HCN call takes
``--latency`` seconds (20 ms: a loaded real host's order of magnitude),
counted as a real host is called through ``computenetwork.dll`` (reading
an endpoint is an open, a query and a close; a modify an open, the modify
and a close). The host already holds one local endpoint per workload, as
the CNI leaves them. The periodic re-read is off (a tick landing in a
measured step would end it). For IP sets expanded into ACLs and as
``SetPolicy`` objects:

1. **programmed**: all messages in until the loop reports DataplaneInSync
   (the first apply done), and the HCN calls that took, beside the
   **floor**: the fewest calls through the DLL (the networks read, one
   enumerate, each endpoint read and written through one handle: open,
   query, modify, close);
2. **one member change**: one ``IPSetDeltaUpdate`` (a member added to the
   set referenced by the most endpoints) until its apply is done: calls and
   time, beside the number of endpoints whose rules reference the set;
3. **one new endpoint**: the CNI's endpoint appears and Felix's
   ``WorkloadEndpointUpdate`` follows: calls and time until it is applied.

The goals: the initial sync makes one ``ModifyEndpoint`` per endpoint
(plus set objects where used), a member change calls only for the
endpoints whose rules reference that set (issue 10); a new pod costs at
most 5 calls (issue 25).

Usage: python benchmarks/bench_windows.py [--quick] [--endpoints N] [--policies N]
       [--sets N] [--members N] [--latency SECONDS] [--modes expanded,setpolicy]
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import trio
from google.protobuf.message import Message

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine, markdown_table
from benchmarks._hns import Step, calls_text, program, step
from benchmarks._node import NodeBuilder, Sizes, add_size_arguments
from benchmarks._runs import apply_quick
from dataplane.core.loop import Dataplane
from dataplane.managers.convert import policy_key
from dataplane.windows.hns.hcn import writes
from dataplane.windows.platform import WindowsPlatform
from dataplane.windows.sim.simhost import NEWEST, SimHost
from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.hns import NETWORK_ID, calico_host


def _endpoint(host: SimHost, update: pb.WorkloadEndpointUpdate) -> None:
    """The CNI's endpoint for ``update``'s workload."""
    nets = [*update.endpoint.ipv4_nets, *update.endpoint.ipv6_nets]
    host.add_local_endpoint(
        NETWORK_ID,
        {
            "Name": update.id.workload_id.replace("/", "_"),
            "IpConfigurations": [{"IpAddress": n.split("/")[0]} for n in nets],
        },
    )


def _busiest_set(msgs: list[Message]) -> tuple[str, int]:
    """The address set referenced by the most endpoints' rules, and how many."""
    sets_of: dict[object, set[str]] = {}
    for m in msgs:
        if isinstance(m, pb.ActivePolicyUpdate):
            rules = [*m.policy.inbound_rules, *m.policy.outbound_rules]
            sets_of[policy_key(m.id)] = {
                s
                for r in rules
                for s in (
                    *r.src_ip_set_ids,
                    *r.dst_ip_set_ids,
                    *r.not_src_ip_set_ids,
                    *r.not_dst_ip_set_ids,
                )
            }
    users: Counter[str] = Counter()
    for m in msgs:
        if isinstance(m, pb.WorkloadEndpointUpdate):
            used: set[str] = set()
            for tier in m.endpoint.tiers:
                for pid in (*tier.ingress_policies, *tier.egress_policies):
                    used |= sets_of.get(policy_key(pid), set())
            users.update(used)
    # Ties broken by id: users.update() took the sets in hash order, which
    # changes from run to run, and so would the set measured.
    set_id = max(users, key=lambda s: (users[s], s))
    return set_id, users[set_id]


@dataclass
class Result:
    users: int = 0  # endpoints whose rules reference the changed set
    programmed: Step = field(default_factory=Step)
    member: Step = field(default_factory=Step)  # one member change
    new: Step = field(default_factory=Step)  # one new endpoint
    fail_closed: int = 0


def run(builder: NodeBuilder, latency: float, set_policy: bool) -> Result:
    msgs = builder.snapshot()
    for m in msgs:
        if isinstance(m, pb.ConfigUpdate):
            # No periodic re-read: a refresh tick landing in a measured step
            # would end the step with its own apply.
            m.config["EndpointRefreshInterval"] = "0"
    host = calico_host([], NEWEST, latency=latency)
    for m in msgs:
        if isinstance(m, pb.WorkloadEndpointUpdate):
            _endpoint(host, m)
    busy, users = _busiest_set(msgs)
    extra = builder.additions()[0]
    assert isinstance(extra, pb.WorkloadEndpointUpdate)
    platform = WindowsPlatform(host, use_set_policy=set_policy)
    out = Result(users)

    async def main() -> None:
        dp = Dataplane(platform)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            out.programmed = await program(dp, host, msgs)
            added = pb.IPSetDeltaUpdate(id=busy, added_members=["10.191.255.254"])
            out.member = await step(dp, host, added)
            _endpoint(host, extra)
            out.new = await step(dp, host, extra)
            out.fail_closed = len(platform.fail_closed())
            dp.close_input()

    trio.run(main)
    return out


def floor_calls(endpoints: int, *, sets: bool) -> int:
    """The fewest calls through the DLL: the version, the networks read (an enumerate,
    then open, query, close each of the host's two), one enumerate of our network's
    endpoints, and each endpoint read and written through one handle (open, query,
    modify, close); with sets as objects, one ModifyNetwork (open, modify, close)."""
    return 1 + (1 + 3 * 2) + 1 + 4 * endpoints + (3 if sets else 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_size_arguments(parser)
    parser.set_defaults(members=50_000)
    parser.add_argument("--latency", type=float, default=0.020)
    parser.add_argument("--modes", default="expanded,setpolicy")
    parser.add_argument("--quick", action="store_true", help="a small node, for CI")
    args = parser.parse_args()
    apply_quick(args, {"endpoints": 50, "policies": 20, "sets": 40, "members": 2_000})
    logging.basicConfig(level=logging.ERROR)
    sizes = Sizes(args.endpoints, args.policies, args.sets, args.members, spare=1)
    rows = []
    for mode in args.modes.split(","):
        result = run(NodeBuilder(sizes, "legacy"), args.latency, set_policy=mode == "setpolicy")
        floor = floor_calls(args.endpoints, sets=mode == "setpolicy")
        measured = result.programmed.calls.total()
        rows.append(
            [
                mode,
                f"{result.programmed.seconds:.1f} s",
                f"{measured:,} ({calls_text(writes(result.programmed.calls))})",
                f"{floor:,} calls, {floor * args.latency:.1f} s",
                f"{measured / floor:.2f}x calls, "
                f"{result.programmed.seconds / max(floor * args.latency, 1e-9):.2f}x time",
                f"{calls_text(result.member.calls)} ({result.users} endpoints use the set)",
                f"{result.member.seconds * 1000:.0f} ms",
                calls_text(result.new.calls),
                f"{result.new.seconds * 1000:.0f} ms",
                str(result.fail_closed),
            ]
        )
    print(
        f"{args.endpoints} endpoints, {args.policies} policies, {args.sets} IP sets /"
        f" {args.members} members, {args.latency * 1000:.0f} ms per HCN call; {machine()}"
    )
    print(
        markdown_table(
            [
                "IP sets",
                "programmed",
                "HCN calls",
                "floor",
                "ratio",
                "one member change: calls",
                "time",
                "one new endpoint: calls",
                "time",
                "rules failing closed",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
