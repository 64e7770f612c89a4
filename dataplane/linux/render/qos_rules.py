"""A workload's packet-rate and connection limits, as filter rules. Pure.

Felix enforces both in the workload's endpoint chains: the packet rate
before its conntrack rules, so that every packet counts, and the
connection limit after them, so that only new connections do
(``felix/rules/endpoints.go``). Here established traffic is accepted
before dispatch (:mod:`dataplane.linux.render.filter`), so:

- packet rates live in two chains of their own, jumped to first thing
  from ``cali-FORWARD`` (and from ``cali-wl-to-host`` for traffic from a
  workload to the host): per limited interface, what is within the rate
  returns and the rest is dropped. One rule pair per limited endpoint,
  whatever the policy: a ``limit`` match counts for its own rule only.
- a connection limit is the first rule of the workload's chain, which
  only new connections reach: more than N open (counted by that rule)
  and the connection is refused with a TCP reset, as Felix refuses it.
  The rule names the interface, so on nftables, where endpoints with the
  same policy share chains, a limited endpoint has chains of its own and
  never shares its count.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.rules.action import Drop, Reject, Return
from dataplane.linux.rules.chain import Chain, Serialiser
from dataplane.linux.rules.match import ConnLimit, Interface, Limit, Protocol
from dataplane.linux.rules.rule import TableRule
from dataplane.model import WorkloadEndpoint

__all__ = ["connection_limit", "packet_rate_chain", "packet_rate_chains"]

R = TypeVar("R")


def packet_rate_chain(names: ChainNames, inbound: bool) -> str:
    """The chain of the packet-rate limits of traffic to (``inbound``) or from workloads."""
    return names.top("qos-to-wl" if inbound else "qos-from-wl")


def connection_limit(endpoint: WorkloadEndpoint, inbound: bool) -> list[TableRule]:
    """The connection-limit rule ``endpoint``'s chain for the direction starts with, if any."""
    limit = endpoint.qos.direction(inbound).max_connections
    if not limit:
        return []
    way = "ingress" if inbound else "egress"
    return [
        TableRule(
            (Protocol("tcp"), ConnLimit(limit)),
            Reject(tcp_reset=True),
            comment=f"{endpoint.name} {way} connection limit {limit}",
        )
    ]


def _rate_rules(endpoints: Iterable[WorkloadEndpoint], inbound: bool) -> list[TableRule]:
    out: list[TableRule] = []
    for endpoint in sorted(endpoints, key=lambda e: e.name):
        rate = endpoint.qos.direction(inbound).packet_rate
        if rate is None or not endpoint.admin_up:
            continue
        # The workload's side of the packet: it arrives from the workload
        # (egress) or leaves to it (ingress).
        iface = Interface(endpoint.name, inbound=not inbound)
        way = "ingress" if inbound else "egress"
        out.append(TableRule((iface, Limit(f"{rate.rate}/second", rate.burst)), Return()))
        out.append(
            TableRule(
                (iface,),
                Drop(),
                comment=f"{endpoint.name} over its {way} packet rate {rate.rate}/s",
            )
        )
    return out


def packet_rate_chains(
    names: ChainNames, out: Serialiser[R], endpoints: Iterable[WorkloadEndpoint]
) -> list[Chain[R]]:
    """Both packet-rate chains (empty when no endpoint is limited: the jumps stay)."""
    endpoints = list(endpoints)
    return [
        Chain(packet_rate_chain(names, inbound), out.rules(_rate_rules(endpoints, inbound)))
        for inbound in (True, False)
    ]
