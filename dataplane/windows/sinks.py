"""The Windows platform's sink side: each value the managers hand over, to
what keeps it (the desired ACLs and sets, the QoS, VXLAN and load balancer
programmers).

No I/O: values are kept until the next apply writes them. What HNS has
no form for (host endpoints, DSCP, most QoS controls) is said once, as a
warning, and not programmed (Felix has no Windows form for them either).
"""

from __future__ import annotations

import logging

from dataplane.core.platform import PolicyUsers
from dataplane.model import (
    EffectivePolicy,
    HostEffectivePolicy,
    HostEndpoint,
    HostEndpointKey,
    IPPool,
    IPSet,
    Policy,
    PolicyKey,
    Profile,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)
from dataplane.model.hosts import Encapsulation, Host
from dataplane.model.routes import Route, Vtep
from dataplane.model.services import Service, ServiceKey
from dataplane.windows.overlay.vxlan_programmer import VxlanProgrammer
from dataplane.windows.policy.desired import Desired
from dataplane.windows.policy.programmers import EndpointProgrammer
from dataplane.windows.policy.qos_policy import QosProgrammer
from dataplane.windows.services.lb_programmer import LbProgrammer

__all__ = ["WindowsSinks"]

log = logging.getLogger("dataplane.windows.platform")


class WindowsSinks:
    """The sink methods of :class:`~dataplane.windows.platform.WindowsPlatform`,
    over the state it sets up."""

    _desired: Desired
    _endpoints: EndpointProgrammer[WorkloadEndpointKey]
    _qos: QosProgrammer[WorkloadEndpointKey]
    _vxlan: VxlanProgrammer
    _lbs: LbProgrammer
    _unsupported_logged: set[str]

    def bind_policy_users(self, users: PolicyUsers) -> None:
        self._desired.users = users

    def replace_ipset(self, ipset: IPSet) -> None:
        self._desired.replace_ipset(ipset)

    def update_ipset_members(
        self, set_id: str, added: frozenset[str], removed: frozenset[str]
    ) -> None:
        self._desired.update_ipset_members(set_id, added, removed)

    def remove_ipset(self, set_id: str) -> None:
        self._desired.remove_ipset(set_id)

    def set_policy(self, key: PolicyKey, policy: Policy) -> None:
        self._desired.set_policy(key, policy)

    def remove_policy(self, key: PolicyKey) -> None:
        self._desired.set_policy(key, None)

    def set_profile(self, profile_id: str, profile: Profile) -> None:
        self._desired.set_profile(profile_id, profile)

    def remove_profile(self, profile_id: str) -> None:
        self._desired.set_profile(profile_id, None)

    def set_workload_endpoint(self, endpoint: WorkloadEndpoint, policy: EffectivePolicy) -> None:
        qos = endpoint.qos
        egress = qos.egress.bandwidth
        # HNS caps an endpoint's egress and nothing else (qos_policy.py).
        self._qos.want(endpoint.key, egress.rate // 8 if egress else None)
        if endpoint.dscp:
            self._unsupported("DSCP marking (qos_policies; HNS has no form for it)")
        if qos.ingress or qos.egress.packet_rate or qos.egress.max_connections:
            self._unsupported(
                "QoS controls other than the egress bandwidth (ingress bandwidth, packet"
                " rates, connection limits; HNS has no form for them)"
            )
        self._desired.set_endpoint(endpoint, policy)

    def remove_workload_endpoint(self, key: WorkloadEndpointKey) -> None:
        # HNS drops an endpoint's ACLs with the endpoint; the CNI deletes it.
        self._desired.remove_endpoint(key)
        self._endpoints.forget(key)
        self._qos.forget(key)

    def _unsupported(self, what: str) -> None:
        if what not in self._unsupported_logged:
            self._unsupported_logged.add(what)
            log.warning("%s: not programmed on Windows (Felix has no Windows form either)", what)

    def set_host_endpoint(self, endpoint: HostEndpoint, policy: HostEffectivePolicy) -> None:
        self._unsupported("host endpoints")

    def remove_host_endpoint(self, key: HostEndpointKey) -> None:
        pass

    def set_ip_pool(self, pool_id: str, pool: IPPool) -> None:
        # Outgoing NAT on Windows is the HNS network's OutBoundNAT policy, set
        # up with the network by the CNI; pools change nothing here.
        pass

    def remove_ip_pool(self, pool_id: str) -> None:
        pass

    def set_vtep(self, vtep: Vtep) -> None:
        self._vxlan.set_vtep(vtep)
        self._lbs.touch()  # remote backends' provider addresses

    def remove_vtep(self, node: str) -> None:
        self._vxlan.remove_vtep(node)
        self._lbs.touch()

    def set_route(self, route: Route) -> None:
        self._vxlan.set_route(route)
        self._lbs.touch()

    def remove_route(self, dst: str) -> None:
        self._vxlan.remove_route(dst)
        self._lbs.touch()

    def set_host(self, host: Host) -> None:
        pass  # HNS needs no other node's metadata: routes carry their node's address

    def remove_host(self, name: str) -> None:
        pass

    def set_encapsulation(self, encapsulation: Encapsulation) -> None:
        pass  # the CNI chose the network type (Overlay or L2Bridge) already

    def set_service(self, service: Service) -> None:
        self._lbs.wanted.set_service(service)

    def remove_service(self, key: ServiceKey) -> None:
        self._lbs.wanted.remove_service(key)
