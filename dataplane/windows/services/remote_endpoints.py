"""Remote endpoints: how an HNS load balancer reaches a backend on another node. Pure.

HNS balances only to endpoints it knows, so a backend on another node needs
a *remote* endpoint on this host (``Flags`` RemoteEndpoint) holding its
address. kube-proxy's winkernel creates them the same way: a MAC conjured
from the address (``02-11-`` and the address's bytes), and on an Overlay
network a ``ProviderAddress`` policy naming the node the pod runs on (the
outer destination of the VXLAN packets), here taken from that node's
VTEP.

Ours carry a name with :data:`REMOTE_PREFIX`, so a listing tells them from
kube-proxy's or anyone else's, which are never touched; the id is derived
from the network and address, so a create retried after an error HNS
reported, but carried out, finds the endpoint instead of making a second
one.
"""

from __future__ import annotations

import ipaddress
import uuid
from dataclasses import dataclass

from dataplane.windows.hns.hcn import ENDPOINT_REMOTE, Json

__all__ = ["REMOTE_PREFIX", "RemoteEndpoint", "conjure_mac", "parse_remote"]

REMOTE_PREFIX = "dataplane-remote-"
_IDS = uuid.UUID("3f8a0c52-5d0e-4a4e-9a43-7f1d2b6c9e10")  # our namespace for derived ids


def conjure_mac(address: str) -> str:
    """kube-proxy's MAC for a remote endpoint: 02-11 and four bytes of the address."""
    ip = ipaddress.ip_address(address)
    raw = ip.packed
    # IPv4: its four bytes in order; IPv6: the last four, lowest first (as winkernel).
    four = raw if ip.version == 4 else bytes(reversed(raw[12:]))
    return "02-11-" + "-".join(f"{b:02x}" for b in four)


@dataclass(frozen=True, slots=True, order=True)
class RemoteEndpoint:
    """A backend on another node as this host's HNS must hold it."""

    network_id: str
    address: str
    provider: str  # the backend's node address; "" where the network needs none

    @property
    def id(self) -> str:
        return str(uuid.uuid5(_IDS, f"{self.network_id.upper()}|{self.address}")).upper()

    @property
    def name(self) -> str:
        return f"{REMOTE_PREFIX}{self.address}"

    def json(self) -> Json:
        out: Json = {
            "ID": self.id,
            "Name": self.name,
            "HostComputeNetwork": self.network_id,
            "Flags": ENDPOINT_REMOTE,
            "IpConfigurations": [{"IpAddress": self.address}],
            "MacAddress": conjure_mac(self.address),
            "SchemaVersion": {"Major": 2, "Minor": 0},
        }
        if self.provider:
            out["Policies"] = [
                {"Type": "ProviderAddress", "Settings": {"ProviderAddress": self.provider}}
            ]
        return out


def parse_remote(endpoint: Json) -> RemoteEndpoint | None:
    """One of our remote endpoints as HNS lists it; None if it is not ours."""
    if not str(endpoint.get("Name", "")).startswith(REMOTE_PREFIX):
        return None
    if not int(endpoint.get("Flags") or 0) & ENDPOINT_REMOTE:
        return None
    configs = endpoint.get("IpConfigurations") or [{}]
    provider = ""
    for policy in endpoint.get("Policies") or ():
        if policy.get("Type") == "ProviderAddress":
            provider = str((policy.get("Settings") or {}).get("ProviderAddress", ""))
    try:
        address = str(ipaddress.ip_address(str(configs[0].get("IpAddress"))))
    except ValueError:
        address = str(configs[0].get("IpAddress"))  # odd; it will not match a wanted one
    return RemoteEndpoint(str(endpoint.get("HostComputeNetwork", "")).upper(), address, provider)
