"""The Felix messages that describe a Kubernetes node's pods, as Calico names them.

One place for what every generated node shares: pod addresses in the pod
CIDRs that :mod:`testbed.topology` routes, interface names as Calico's CNI
derives them, IP set ids as Felix hashes selectors, namespace profiles and
workload endpoint updates. The policy content differs per user (the kernel
tests' scenario, the demo, the benchmarks) and stays with each of them.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from dataplane.wire._pb import felixbackend_pb2 as pb

__all__ = [
    "PodSpec",
    "allow_all_profile",
    "calico_iface",
    "felix_set_id",
    "named_port_set",
    "namespace_profiles",
    "pod_ipv4",
    "pod_ipv6",
    "selector_set",
    "workload_endpoint_id",
    "workload_update",
]


def felix_set_id(prefix: str, text: str) -> str:
    """An IP set id as Felix makes one: a prefix and 28 characters of a hash."""
    digest = hashlib.sha224(text.encode()).digest()
    return prefix + base64.urlsafe_b64encode(digest).decode()[:28]


def selector_set(selector: str) -> str:
    return felix_set_id("s:", selector)


def named_port_set(selector: str, port: str) -> str:
    return felix_set_id("n:", f"{selector}|{port}")


def calico_iface(key: str, prefix: str = "cali") -> str:
    """A host-side name as Calico's CNI derives it: a prefix and 11 hex digits of a hash."""
    return prefix + hashlib.sha1(key.encode()).hexdigest()[:11]


def pod_ipv4(number: int) -> str:
    """Address ``number`` of 10.65.0.0/16 (testbed.topology's POD_CIDR_V4)."""
    return f"10.65.{(number >> 8) & 255}.{number & 255}"


def pod_ipv6(number: int) -> str:
    """Address ``number`` of fd00:10:65::/48 (testbed.topology's POD_CIDR_V6)."""
    return f"fd00:10:65::{number:x}"


@dataclass(frozen=True)
class PodSpec:
    """A pod by name, namespace and app label; its addresses follow from ``index``."""

    name: str
    namespace: str
    app: str
    index: int

    @property
    def ipv4(self) -> str:
        return pod_ipv4(self.index)

    @property
    def ipv6(self) -> str:
        return pod_ipv6(self.index)

    @property
    def iface(self) -> str:
        return calico_iface(f"{self.namespace}.{self.name}")

    @property
    def workload_id(self) -> str:
        return f"{self.namespace}/{self.name}"


def allow_all_profile(name: str) -> pb.ActiveProfileUpdate:
    """A profile that allows everything both ways, as Calico's namespace profiles do."""
    return pb.ActiveProfileUpdate(
        id=pb.ProfileID(name=name),
        profile=pb.Profile(
            inbound_rules=[pb.Rule(action="allow")],
            outbound_rules=[pb.Rule(action="allow")],
        ),
    )


def namespace_profiles(namespace: str) -> list[pb.ActiveProfileUpdate]:
    """A namespace's ``kns.`` profile (allow all) and its default service account's."""
    return [
        allow_all_profile(f"kns.{namespace}"),
        pb.ActiveProfileUpdate(
            id=pb.ProfileID(name=f"ksa.{namespace}.default"), profile=pb.Profile()
        ),
    ]


def workload_endpoint_id(workload_id: str) -> pb.WorkloadEndpointID:
    """The id Felix gives a Kubernetes pod's endpoint: orchestrator k8s, endpoint eth0."""
    return pb.WorkloadEndpointID(orchestrator_id="k8s", workload_id=workload_id, endpoint_id="eth0")


def workload_update(
    workload_id: str,
    iface: str,
    *,
    ipv4: Sequence[str] = (),
    ipv6: Sequence[str] = (),
    profiles: Sequence[str] = (),
    tiers: Sequence[pb.TierInfo] = (),
    mac: str = "",
    state: str = "active",
) -> pb.WorkloadEndpointUpdate:
    """A Kubernetes pod's endpoint (``eth0``), one host address per given IP."""
    return pb.WorkloadEndpointUpdate(
        id=workload_endpoint_id(workload_id),
        endpoint=pb.WorkloadEndpoint(
            state=state,
            name=iface,
            mac=mac,
            profile_ids=list(profiles),
            ipv4_nets=[f"{ip}/32" for ip in ipv4],
            ipv6_nets=[f"{ip}/128" for ip in ipv6],
            tiers=list(tiers),
        ),
    )
