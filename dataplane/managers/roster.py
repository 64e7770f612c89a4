"""The managers a node runs, in the order they complete, and their configuration."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dataplane.config import Config
from dataplane.core.platform import Platform
from dataplane.managers import (
    EndpointManager,
    HostsManager,
    IPSetsManager,
    Manager,
    PolicyManager,
    PoolsManager,
    RoutesManager,
    ServicesManager,
)
from dataplane.managers.index import PolicyIndex

__all__ = ["Roster", "configure", "standard"]


@dataclass(frozen=True, slots=True)
class Roster:
    index: PolicyIndex  # shared by the policy-side managers; the platform looks users up in it
    services: ServicesManager
    managers: list[Manager]  # in completion order; more may be registered


def standard(platform: Platform) -> Roster:
    """Every manager, bound to ``platform``. Order matters: IP sets complete
    first (a set's change of shape rewrites the rules on it), then rules,
    then the endpoints that jump to them."""
    index = PolicyIndex()
    platform.bind_policy_users(index)
    services = ServicesManager(platform)
    managers: list[Manager] = [
        IPSetsManager(platform, index),
        PolicyManager(platform, index),
        EndpointManager(platform, index),
        PoolsManager(platform),
        RoutesManager(platform),
        HostsManager(platform),
        services,
    ]
    return Roster(index, services, managers)


def configure(managers: Iterable[Manager], config: Config) -> None:
    """A new configuration to every manager that takes one."""
    for manager in managers:
        take = getattr(manager, "configure", None)
        if take is not None:
            take(config)
