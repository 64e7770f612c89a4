"""What one listing of HNS shows the driver: our networks, local endpoints by IP, their ACLs.

The CNI plugin, not this driver, creates a pod's HNS endpoint; the driver
finds it by IP address, on the networks whose name matches ``KUBE_NETWORK``
(Felix's default ``Calico.*``, case-insensitive), and keeps remote endpoints
(``Flags`` bit 1: a load balancer's way to pods on other nodes) apart, for
the service programmer; they have no ACLs of ours. A view lives as long as
the platform and is kept up to date piece by piece (:mod:`dataplane.windows.view.hns_listing`):
endpoints added as they are read, forgotten as they vanish.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections import Counter
from dataclasses import dataclass, field

from dataplane.windows.hns.acl import AclRule, parse_acl
from dataplane.windows.hns.hcn import ENDPOINT_REMOTE, Json

__all__ = ["DEFAULT_NETWORK_PATTERN", "HnsEndpoint", "HnsView", "acl_key", "our_networks"]

DEFAULT_NETWORK_PATTERN = "Calico.*"


_UNREADABLE = AclRule("?", "?", "?", -1, None, (), (), (), ())


@functools.lru_cache(maxsize=65536)
def _parsed(items: tuple[tuple[str, object], ...]) -> AclRule:
    # Endpoints that share a policy hold the same ACLs: parse each once.
    try:
        return parse_acl(dict(items))
    except ValueError:
        return _UNREADABLE  # someone else's odd rule: it differs from ours


def acl_key(policies: list[Json]) -> Counter[AclRule]:
    """The ACL policies among ``policies`` as a comparable multiset.

    HNS decides by priority, not list order, so two lists with the same
    rules are the same policy however HNS returns them.
    """
    rules: Counter[AclRule] = Counter()
    for policy in policies:
        if policy.get("Type") == "ACL":
            settings = policy.get("Settings") or {}
            if not isinstance(settings, dict):
                rules[_UNREADABLE] += 1
                continue
            try:
                rules[_parsed(tuple(sorted(settings.items())))] += 1
            except TypeError:  # an unhashable value: not an ACL of ours
                rules[_UNREADABLE] += 1
    return rules


QOS = "QOS"  # the endpoint policy type of an egress cap
QOS_SETTING = "MaximumOutgoingBandwidthInBytes"


def held_qos(policies: list[Json]) -> int | None:
    """The egress cap an endpoint's ``QOS`` policy holds, bytes per second (None: none)."""
    for policy in policies:
        if policy.get("Type") == QOS:
            value = (policy.get("Settings") or {}).get(QOS_SETTING)
            return value if isinstance(value, int) else 0
    return None


@dataclass(slots=True)
class HnsEndpoint:
    id: str
    network_id: str
    name: str
    addresses: tuple[str, ...]
    acls: Counter[AclRule] = field(default_factory=Counter)
    qos: int | None = None  # its QOS policy's egress cap, bytes per second


@dataclass(slots=True)
class HnsView:
    """Local endpoints on our networks, by HNS id and by IP address; remote ones apart."""

    networks: dict[str, Json] = field(default_factory=dict)  # ours, by ID
    endpoints: dict[str, HnsEndpoint] = field(default_factory=dict)
    by_address: dict[str, str] = field(default_factory=dict)
    remotes: dict[str, Json] = field(default_factory=dict)  # remote endpoints, by ID

    @classmethod
    def build(cls, networks: list[Json], endpoints: list[Json], pattern: str) -> HnsView:
        view = cls(our_networks(networks, pattern))
        for ep in endpoints:
            view.add(ep)
        return view

    def add(self, ep: Json) -> None:
        """An endpoint as HNS holds it now (new, or read again); not ours to keep if
        it is on a network that is not ours."""
        network = str(ep.get("HostComputeNetwork", "")).upper()
        if network not in self.networks:
            return
        endpoint_id = str(ep["ID"]).upper()
        self.forget(endpoint_id)
        if int(ep.get("Flags") or 0) & ENDPOINT_REMOTE:
            self.remotes[endpoint_id] = ep
            return
        addresses = tuple(
            str(ipaddress.ip_address(c["IpAddress"]))
            for c in ep.get("IpConfigurations") or ()
            if c.get("IpAddress")
        )
        found = HnsEndpoint(
            endpoint_id,
            network,
            str(ep.get("Name", "")),
            addresses,
            acl_key(ep.get("Policies") or []),
            held_qos(ep.get("Policies") or []),
        )
        self.endpoints[found.id] = found
        for address in addresses:
            self.by_address[address] = found.id

    def ids(self, network_id: str) -> set[str]:
        """Every endpoint of ``network_id`` this view holds, local or remote."""
        local = {i for i, ep in self.endpoints.items() if ep.network_id == network_id}
        remote = {
            i
            for i, ep in self.remotes.items()
            if str(ep.get("HostComputeNetwork", "")).upper() == network_id
        }
        return local | remote

    def find(self, addresses: tuple[str, ...]) -> HnsEndpoint | None:
        """The local endpoint holding any of ``addresses`` (a workload's IPs)."""
        for address in addresses:
            found = self.by_address.get(address)
            if found is not None:
                return self.endpoints[found]
        return None

    def forget(self, endpoint_id: str) -> None:
        """The endpoint is gone (deleted, or behind our back), or about to be read again."""
        self.remotes.pop(endpoint_id, None)
        gone = self.endpoints.pop(endpoint_id, None)
        if gone is not None:
            for address in gone.addresses:
                if self.by_address.get(address) == endpoint_id:
                    del self.by_address[address]


def our_networks(networks: list[Json], pattern: str) -> dict[str, Json]:
    """The networks whose name fully matches ``pattern`` (case-insensitive), by id."""
    regex = re.compile(pattern, re.IGNORECASE)
    return {
        str(n["ID"]).upper(): n
        for n in networks
        if n.get("ID") and regex.fullmatch(str(n.get("Name", "")))
    }
