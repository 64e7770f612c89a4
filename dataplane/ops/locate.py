"""Where an address is on this node: a local workload, the host, or outside.

``explain`` places a packet's source and destination (and a service's
chosen backend) so; a source may also be named as the workload sending
it, whether or not the address is its own (a spoofing test).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dataplane.model import WorkloadEndpoint
from dataplane.ops.rule_match import in_any
from dataplane.sim.platform import SimState

__all__ = ["Location", "LocationKind", "locate", "sender"]

LocationKind = Literal["workload", "host", "outside"]


@dataclass(frozen=True, slots=True)
class Location:
    """What an address is on this node."""

    address: str
    kind: LocationKind
    endpoint: WorkloadEndpoint | None = None
    host_endpoint: str | None = None  # the host endpoint expecting the address

    def to_json(self) -> dict[str, object]:
        ep = self.endpoint
        return {
            "address": self.address,
            "kind": self.kind,
            "endpoint": None if ep is None else str(ep.key),
            "interface": None if ep is None else ep.name,
            "host_endpoint": self.host_endpoint,
        }

    def __str__(self) -> str:
        if self.endpoint is not None:
            return f"{self.address}, workload {self.endpoint.key} ({self.endpoint.name})"
        if self.host_endpoint is not None:
            return f"{self.address}, this host (host endpoint {self.host_endpoint})"
        return f"{self.address}, outside this node"


def locate(state: SimState, address: str) -> Location:
    """A local workload owning ``address``, else the host, else outside."""
    for key in sorted(state.workload_endpoints):
        ep = state.workload_endpoints[key]
        if in_any(address, (*ep.ipv4_nets, *ep.ipv6_nets)):
            return Location(address, "workload", endpoint=ep)
    for hkey in sorted(state.host_endpoints):
        hep = state.host_endpoints[hkey]
        if in_any(address, (*hep.expected_ipv4_addrs, *hep.expected_ipv6_addrs)):
            return Location(address, "host", host_endpoint=str(hkey))
    return Location(address, "outside")


def sender(state: SimState, name: str, address: str) -> Location:
    """``address`` sent by the workload ``name`` (whether or not it owns the address)."""
    for key in sorted(state.workload_endpoints):
        ep = state.workload_endpoints[key]
        if name in (str(key), key.workload_id, ep.name):
            return Location(address, "workload", endpoint=ep)
    raise ValueError(f"no local workload endpoint {name!r}")
