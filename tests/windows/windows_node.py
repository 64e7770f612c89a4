"""The policy matrix scenario on a simulated Windows node, and its expected verdicts.

The same Felix messages as the Linux policy tests (``tests/kernel/scenario.py``);
expected verdicts come from the reference evaluator over the same model the
managers build, and the Windows verdicts from the simulated host's ACLs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

import trio
import trio.testing
from google.protobuf.message import Message

from dataplane.core.loop import Dataplane
from dataplane.managers import convert
from dataplane.model import IPSet, IPSetType, WorkloadEndpoint
from dataplane.windows.hns import acl
from dataplane.windows.hns.hcn import Json
from dataplane.windows.platform import WindowsPlatform
from dataplane.windows.sim.simhost import SimHost
from dataplane.windows.sim.verdict import packet_verdict
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests import reference_eval as ref
from tests.kernel import scenario as sc

T = TypeVar("T")
_TYPES = {
    pb.IPSetUpdate.IP: IPSetType.IP,
    pb.IPSetUpdate.NET: IPSetType.NET,
    pb.IPSetUpdate.IP_AND_PORT: IPSetType.IP_AND_PORT,
}


async def inline(fn: Callable[[], T]) -> T:
    """Run an HCN call on the loop's thread: tests see every call finish before settling."""
    return fn()


@asynccontextmanager
async def node(
    host: SimHost, **options: object
) -> AsyncIterator[tuple[Dataplane, WindowsPlatform]]:
    """A running loop over a Windows platform on ``host``; input closed on exit."""
    platform = WindowsPlatform(host, offload=inline, **options)  # type: ignore[arg-type]
    dp = Dataplane(platform)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(dp.run)
        yield dp, platform
        dp.close_input()


async def send(dp: Dataplane, *msgs: Message) -> None:
    for msg in msgs:
        dp.send_message(msg)
    await trio.testing.wait_all_tasks_blocked()


def messages() -> list[Message]:
    return sc.node_messages({p.name: p.iface for p in sc.PODS})


@dataclass(frozen=True)
class Model:
    """The reference evaluator's view of a list of Felix messages."""

    endpoints: dict[str, WorkloadEndpoint]
    state: ref.PolicyState

    @classmethod
    def of(cls, msgs: list[Message]) -> Model:
        policies, profiles, sets, endpoints = {}, {}, {}, {}
        for m in msgs:
            if isinstance(m, pb.ActivePolicyUpdate):
                policies[convert.policy_key(m.id)] = convert.policy(m.policy)
            elif isinstance(m, pb.ActiveProfileUpdate):
                profiles[m.id.name] = convert.profile(m.profile)
            elif isinstance(m, pb.IPSetUpdate):
                sets[m.id] = IPSet(m.id, _TYPES[m.type], frozenset(m.members))
            elif isinstance(m, pb.WorkloadEndpointUpdate):
                key = convert.workload_key(m.id)
                endpoints[key.workload_id] = convert.workload_endpoint(key, m.endpoint)
        return cls(endpoints, ref.PolicyState(policies, profiles, sets))


def probes() -> Iterator[tuple[ref.Packet, acl.Packet]]:
    """Every pod to every other pod, both families: TCP, UDP on the scenario's ports, ICMP."""
    for src in sc.PODS:
        for dst in sc.PODS:
            if src is dst:
                continue
            for s, d, icmp, number in (
                (src.ipv4, dst.ipv4, "icmp", 1),
                (src.ipv6, dst.ipv6, "icmpv6", 58),
            ):
                for port in (8080, 9090, 5432, 6666, 53, 22):
                    yield ref.Packet(s, d, "tcp", 40000, port), acl.Packet(s, d, 6, 40000, port)
                for port in (53, 5355):
                    yield ref.Packet(s, d, "udp", 40000, port), acl.Packet(s, d, 17, 40000, port)
                echo = 8 if icmp == "icmp" else 128
                yield (
                    ref.Packet(s, d, icmp, icmp_type=echo, icmp_code=0),
                    acl.Packet(s, d, number),
                )


def disagreements(host: Json, model: Model, *, openings_only: bool = False) -> list[str]:
    """Packets whose HNS verdict is not the reference's, except where HNS must fail closed.

    The scenario's only rule HNS cannot say is "ICMPv4 echo from web to
    api" (an ICMP type): the allow is left out, so those packets may drop
    (and nothing else may differ). With ``openings_only``, only packets HNS
    allows that the reference denies: what must never happen, even while
    HNS refuses writes.
    """
    pods = {p.ipv4: p for p in sc.PODS} | {p.ipv6: p for p in sc.PODS}
    out = []
    for ref_packet, hns_packet in probes():
        src, dst = pods[ref_packet.src], pods[ref_packet.dst]
        expected = ref.forward_decision(
            model.endpoints[src.workload_id],
            model.endpoints[dst.workload_id],
            ref_packet,
            model.state,
        )
        got = packet_verdict(host, hns_packet)
        fails_closed = ref_packet.protocol == "icmp" and src.app == "web" and dst.app == "api"
        if got.allowed == expected.allowed or (fails_closed and not got.allowed):
            continue
        if openings_only and not got.allowed:
            continue
        out.append(f"{ref_packet}: HNS {got}, reference {expected}")
    return out
