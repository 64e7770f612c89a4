"""Why a packet between two endpoints of a host is allowed or dropped, from the host's state.

Works on any dump in the simulated host's file format (``{"Networks",
"Endpoints", ...}``): a test's host, or a real node's state captured for
an operator's "why was this packet dropped". A packet from endpoint A to
endpoint B passes when A's ``Out`` ACLs and B's ``In`` ACLs both allow it
(:func:`dataplane.windows.hns.acl.endpoint_verdict`); an address with no local
endpoint (another node, the host) has no ACLs of its own.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from dataplane.windows.hns.acl import Packet, SideVerdict, endpoint_verdict, set_members
from dataplane.windows.hns.hcn import ENDPOINT_REMOTE, Json

__all__ = ["Verdict", "packet_verdict"]


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    reason: str

    def __str__(self) -> str:
        return f"{'allow' if self.allowed else 'drop'} ({self.reason})"


def _local_endpoints(host: Json) -> dict[str, Json]:
    found = {}
    for ep in host.get("Endpoints") or ():
        if int(ep.get("Flags") or 0) & ENDPOINT_REMOTE:
            continue  # a remote endpoint: its ACLs are on its own node
        for config in ep.get("IpConfigurations") or ():
            if config.get("IpAddress"):
                found[str(ipaddress.ip_address(config["IpAddress"]))] = ep
    return found


def _explain(name: str, direction: str, side: SideVerdict) -> str:
    if side.rule is None:
        return f"{direction} of {name}: {'no ACLs' if side.allowed else 'no rule allows it'}"
    r = side.rule
    return f"{direction} of {name}: {r.action} at priority {r.priority}"


def packet_verdict(host: Json, packet: Packet) -> Verdict:
    """The host's verdict on ``packet`` and the rule (or default) on each side that gave it."""
    endpoints = _local_endpoints(host)
    networks = {str(n.get("ID", "")).upper(): n for n in host.get("Networks") or ()}
    reasons = []
    for address, direction in ((packet.src, "Out"), (packet.dst, "In")):
        ep = endpoints.get(str(ipaddress.ip_address(address)))
        if ep is None:
            continue
        network = networks.get(str(ep.get("HostComputeNetwork", "")).upper(), {})
        side = endpoint_verdict(ep, direction, packet, set_members(network))
        why = _explain(str(ep.get("Name") or ep.get("ID")), direction, side)
        if not side.allowed:
            return Verdict(False, why)
        reasons.append(why)
    return Verdict(True, "; ".join(reasons) or "no local endpoint on either side")
