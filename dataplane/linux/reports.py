"""Reports: what the kernel refused, named as operators know it, and statuses.

Reads the writers through their public views and the programmers'
quarantines; changes nothing. A refused chain is logged once with the
policy, profile, endpoint or service it came from, and every endpoint whose
traffic meets a held-back chain, route, sysctl or IP set reports ``error``.
:meth:`Reports.object_errors` lists everything held back now by object.
"""

from __future__ import annotations

import logging

from dataplane.core.platform import EndpointKey, ObjectError, PolicyUsers
from dataplane.linux.owners import ChainOwner, find_owner
from dataplane.linux.programmers import HoldsBack, Programmers
from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.rules.rule import Origin
from dataplane.linux.writers.hosts import HostEndpointWriter
from dataplane.linux.writers.policy import PolicyWriter
from dataplane.linux.writers.routes import RoutesWriter
from dataplane.linux.writers.services import ServiceWriter
from dataplane.linux.writers.workloads import WorkloadWriter

__all__ = ["Reports", "log_held_back"]

log = logging.getLogger(__name__)

# ChainOwner kinds -> ObjectError kinds.
_KINDS = {
    "policy": "policy",
    "profile": "profile",
    "workload endpoint": "workload_endpoint",
    "host endpoint": "host_endpoint",
    "service": "service",
    "chain": "chain",
}


class Reports:
    def __init__(  # noqa: PLR0917 - each is one source of owners
        self,
        names: ChainNames,
        policies: PolicyWriter,
        workloads: WorkloadWriter,
        hosts: HostEndpointWriter,
        services: ServiceWriter,
        users: PolicyUsers,
    ) -> None:
        self._names = names
        self._policies = policies
        self._workloads = workloads
        self._hosts = hosts
        self._services = services
        self._users = users

    def owner(self, table: str, version: int, chain: str, origin: Origin | None) -> ChainOwner:
        return find_owner(
            chain,
            origin,
            names=self._names,
            policies=self._policies.policies,
            profiles=self._policies.profiles,
            workloads=self._workloads,
            hosts=self._hosts,
            users=self._users,
            service_of=lambda name: self._services.service_of(table, version, name),
            sharing=lambda name: self._workloads.sharing(version, name),
        )

    def log_refusals(self, kernel: Programmers) -> None:
        """One line per newly refused chain, naming the object behind it."""
        for (table, version), programmer in kernel.iptables.items():
            for refusal in programmer.take_refusals():
                origin = programmer.origin(refusal.chain, refusal.rule_index)
                kept = _kept(programmer.keeps_last_good(refusal.chain))
                self._log_refusal(
                    table, version, refusal.chain, origin, refusal.message, kept, "iptables"
                )
        for version, nft in kernel.nft.items():
            for name, why in nft.take_refusals():
                table, chain = _in_view(name)
                origin = nft.origin(name, nft.refused_rule(name))
                kept = _kept(nft.keeps_last_good(name))
                self._log_refusal(table, version, chain, origin, why, kept, "nft")

    def _log_refusal(  # noqa: PLR0917 - one log line's parts
        self,
        table: str,
        version: int,
        chain: str,
        origin: Origin | None,
        why: str,
        kept: str,
        tool: str,
    ) -> None:
        owner = self.owner(table, version, chain, origin)
        log.error(
            "%s refused by the kernel (%s v%d %s chain %s): %s; quarantined, %s",
            owner.describe(),
            tool,
            version,
            table,
            chain,
            why,
            kept,
        )

    def _held_chains(self, kernel: Programmers) -> list[tuple[str, int, str, str]]:
        """(table, version, chain, why) of every chain held back now, either backend."""
        held = [
            (table, version, chain, why)
            for (table, version), programmer in sorted(kernel.iptables.items())
            for chain, why in programmer.held_back().items()
        ]
        for version, nft in sorted(kernel.nft.items()):
            for name, why in nft.held_back().items():
                table, chain = _in_view(name)
                held.append((table, version, chain, why))
        return held

    def quarantined(self, kernel: Programmers) -> list[tuple[str, int, str, ChainOwner]]:
        """(table, version, chain, owner) of every chain in quarantine now."""
        return [
            (table, version, chain, self.owner(table, version, chain, None))
            for table, version, chain, _ in self._held_chains(kernel)
        ]

    def object_errors(self, kernel: Programmers) -> list[ObjectError]:
        """Every object held back now, once (the first reason found), sorted.

        Chains are named by the object they were rendered from; IP sets by
        their id, routes by CIDR, interfaces (sysctls, VXLAN devices) by
        name; a VXLAN neighbour or FDB entry the kernel refuses is kind
        ``vxlan``. The reason is the kernel's message, as logged.
        """
        found: dict[tuple[str, str], str] = {}
        for table, version, chain, why in self._held_chains(kernel):
            owner = self.owner(table, version, chain, None)
            found.setdefault((_KINDS[owner.kind], owner.name), why)
        for kind, held in (
            ("ipset", kernel.ipsets.held_back()),
            ("route", kernel.routes.held_back()),
            ("interface", kernel.sysctls.held_back()),
        ):
            for what, why in held.items():
                found.setdefault((kind, what), why)
        for what, why in kernel.vxlan.held_back().items():
            # Entries are "neighbour ..." / "fdbentry ...", devices their name.
            found.setdefault(("vxlan" if " " in what else "interface", what), why)
        return [ObjectError(kind, ident, reason) for (kind, ident), reason in sorted(found.items())]

    def failing(self, kernel: Programmers, routes: RoutesWriter) -> set[EndpointKey]:
        """The endpoints whose policy could not be programmed as asked (their
        traffic meets the last good or a fail-closed version), or whose
        route, interface settings or IP sets the kernel holds back: they
        report ``error``."""
        failing: set[EndpointKey] = set()
        for *_, owner in self.quarantined(kernel):
            failing |= owner.endpoints
        bad_routes = frozenset(kernel.routes.quarantine)
        bad_ifaces = kernel.sysctls.failed
        if bad_routes or bad_ifaces:
            failing |= routes.endpoints_failing(bad_routes, bad_ifaces)
        if kernel.ipsets.quarantine:
            failing |= self._users.endpoints_using_sets(kernel.ipsets.quarantine)
        return failing


def _in_view(name: str) -> tuple[str, str]:
    """(iptables table, chain) of a chain of our nftables table (``filter-cali-x``)."""
    table, _, chain = name.partition("-")
    return table, chain


def _kept(last_good: bool) -> str:
    return "last good version kept" if last_good else "fail-closed"


def log_held_back(kernel: Programmers) -> None:
    """What the kernel newly held back, but chains (named by the object they
    came from, in Reports.log_refusals): one line each, the first time."""
    programmers: tuple[tuple[HoldsBack, str], ...] = (
        (
            kernel.ipsets,
            "IP set %s refused by the kernel: %s; quarantined, the kernel keeps what it"
            " holds of it",
        ),
        (kernel.routes, "route to %s refused by the kernel: %s; quarantined"),
        (kernel.sysctls, "interface %s: %s; retried at the next apply"),
        (kernel.vxlan, "VXLAN %s: %s; retried"),
        (kernel.shaping, "bandwidth limits of %s: %s; retried"),
        *(
            (services, f"service {services.layout.family} %s held back: %s")
            for services in kernel.services.values()
        ),
    )
    for programmer, line in programmers:
        for what, why in programmer.take_refusals():
            log.error(line, what, why)
