"""The platform interface: what managers hand desired state to.

Managers are platform-neutral. They convert protobuf into model values,
compute what is the same on every platform (each endpoint's effective
policy, which objects a change touches, which services really changed) and
push only the changes, in the shape of Contiv's renderer API (set =
add-or-update, remove), into narrow sinks. A platform implements every sink
plus :meth:`Platform.apply`, which makes the kernel (or HNS, or memory)
match what it has been given, in the order it needs.

A platform keeps all desired state it has been handed until it is removed:
if ``apply`` fails, nothing is lost, and the next ``apply`` tries again
with whatever has changed since folded in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from dataplane.config import Config
from dataplane.model import (
    EffectivePolicy,
    EndpointStatus,
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

__all__ = [
    "EndpointKey",
    "EndpointsSink",
    "HostsSink",
    "IPSetsSink",
    "NoPolicyUsers",
    "ObjectError",
    "ObjectErrors",
    "Platform",
    "PolicyUsers",
    "PoolsSink",
    "RoutesSink",
    "RulesSink",
    "ServicesSink",
]

EndpointKey = WorkloadEndpointKey | HostEndpointKey


@dataclass(frozen=True, slots=True)
class ObjectError:
    """One desired object the dataplane refused (quarantined) as of the last apply.

    ``kind`` and ``id`` name it as ``show`` does: ``policy`` (``str`` of its
    :class:`PolicyKey`), ``profile``, ``workload_endpoint`` / ``host_endpoint``
    (``str`` of the key), ``ipset`` (the set id), ``service``
    (``namespace/name``), ``route`` (the destination CIDR), ``vtep`` (the
    node), ``ip_pool``, ``host``; or a kind of the platform's own for
    objects the messages do not name: on Linux ``interface`` (a sysctl or a
    VXLAN device), ``chain`` (one of our static chains), ``vxlan`` (a
    neighbour or FDB entry); on Windows ``network`` (set writes that named
    no IP set), ``remote_endpoint`` (by address), ``load_balancer`` (one no
    service wants).
    """

    kind: str
    id: str
    reason: str


class ObjectErrors(Protocol):
    """Optional on a platform: what it holds in quarantine, by object."""

    def object_errors(self) -> list[ObjectError]:
        """Every object refused and held back now (empty when all is programmed)."""


class IPSetsSink(Protocol):
    def replace_ipset(self, ipset: IPSet) -> None:
        """Desired state of the set is exactly ``ipset`` (creates or rewrites)."""

    def update_ipset_members(
        self, set_id: str, added: frozenset[str], removed: frozenset[str]
    ) -> None:
        """Change members of a set previously given to :meth:`replace_ipset`."""

    def remove_ipset(self, set_id: str) -> None:
        """The set is no longer wanted (idempotent)."""


class RulesSink(Protocol):
    def set_policy(self, key: PolicyKey, policy: Policy) -> None:
        """(Re)write the policy's rules: new, changed, or a set it uses changed shape."""

    def remove_policy(self, key: PolicyKey) -> None: ...

    def set_profile(self, profile_id: str, profile: Profile) -> None: ...

    def remove_profile(self, profile_id: str) -> None: ...


class EndpointsSink(Protocol):
    def set_workload_endpoint(self, endpoint: WorkloadEndpoint, policy: EffectivePolicy) -> None:
        """The endpoint, or the policy that decides its traffic, changed."""

    def remove_workload_endpoint(self, key: WorkloadEndpointKey) -> None: ...

    def set_host_endpoint(self, endpoint: HostEndpoint, policy: HostEffectivePolicy) -> None: ...

    def remove_host_endpoint(self, key: HostEndpointKey) -> None: ...


class PoolsSink(Protocol):
    def set_ip_pool(self, pool_id: str, pool: IPPool) -> None: ...

    def remove_ip_pool(self, pool_id: str) -> None: ...


class RoutesSink(Protocol):
    def set_vtep(self, vtep: Vtep) -> None:
        """A node's VXLAN tunnel endpoint, new or changed (this node's own included)."""

    def remove_vtep(self, node: str) -> None: ...

    def set_route(self, route: Route) -> None:
        """What Felix knows of one destination CIDR, new or changed (keyed by ``dst``)."""

    def remove_route(self, dst: str) -> None: ...


class HostsSink(Protocol):
    def set_host(self, host: Host) -> None:
        """A node's metadata (its addresses), new or changed."""

    def remove_host(self, name: str) -> None: ...

    def set_encapsulation(self, encapsulation: Encapsulation) -> None:
        """The overlays the IP pools use (handed over when it changes)."""


class ServicesSink(Protocol):
    def set_service(self, service: Service) -> None:
        """The full desired state of one service (frontends and backends)."""

    def remove_service(self, key: ServiceKey) -> None: ...


class PolicyUsers(Protocol):
    """The managers' reverse indexes, for a platform to look up, never rebuild."""

    def endpoints_using_policy(self, key: PolicyKey) -> frozenset[EndpointKey]: ...

    def endpoints_using_profile(self, name: str) -> frozenset[EndpointKey]: ...

    def endpoints_using_sets(self, set_ids: Iterable[str]) -> frozenset[EndpointKey]: ...


class NoPolicyUsers:
    """Until the loop binds the managers' index (a platform used on its own)."""

    def endpoints_using_policy(self, key: PolicyKey) -> frozenset[EndpointKey]:
        return frozenset()

    def endpoints_using_profile(self, name: str) -> frozenset[EndpointKey]:
        return frozenset()

    def endpoints_using_sets(self, set_ids: Iterable[str]) -> frozenset[EndpointKey]:
        return frozenset()


class Platform(
    IPSetsSink, RulesSink, EndpointsSink, PoolsSink, RoutesSink, HostsSink, ServicesSink, Protocol
):
    """A complete dataplane backend (Linux, Windows, or the in-memory sim)."""

    name: str

    def bind_policy_users(self, users: PolicyUsers) -> None:
        """Where to look up which endpoints a policy, profile or IP set affects."""

    def wants_apply_at(self) -> float:
        """trio time at which the platform wants an apply even without input.

        Kernel platforms use it for their refresh timers (re-read the kernel,
        repair drift) and to retry endpoints whose interface is not there
        yet; ``math.inf`` means never.
        """

    def configure(self, config: Config) -> None:
        """Take a new configuration; it applies from the next :meth:`apply`."""

    async def apply(self) -> None:
        """Program everything handed over so far.

        Raises:
            ProgrammingError: the dataplane could not be brought to the
                desired state; all desired state is kept for a retry.
        """

    def endpoint_statuses(self) -> Mapping[EndpointKey, EndpointStatus]:
        """Oper status of every endpoint as of the last successful apply."""

    def dump(self) -> str:
        """The programmed state, readable by an operator."""

    async def serve(self) -> None:
        """Long-running platform work (e.g. health-check servers); may return at once."""
