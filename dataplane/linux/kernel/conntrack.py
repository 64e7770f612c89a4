"""Conntrack cleanup for UDP and SCTP services, as kube-proxy does it.

Why: NAT is decided once per flow, on its first packet; every later packet
follows the flow's conntrack entry. A TCP connection to a removed backend
fails and the client reconnects, but a UDP "connection" is only an entry
that each packet refreshes, so a client sending every few seconds would
stay on a removed pod for ever. So after an apply that took backends away
from a UDP or SCTP frontend, the entries of flows DNATed through that
frontend to those backends are deleted: the next packet is a new flow and
meets the new rules. Likewise, when a frontend gains its first backend (a
new service, or an emptied one refilled), entries to the frontend are
deleted, since none of them can have been DNATed to a backend.

Two parts, after the house's split:

* :func:`plan_deletions` -- pure: the previous and the new value of one
  service in, a frozen tuple of :class:`ConntrackDeletion` out.
* :class:`ConntrackCleaner` -- the programmer: remembers the service values
  it last saw, queues their plans, and runs ``conntrack -D`` through the
  injected :class:`~dataplane.linux.kernel.cmd.CommandRunner`. The platform calls
  :meth:`ConntrackCleaner.apply` only after the iptables writes: deleting
  an entry before the new rules are in force would let the next packet
  re-create it through the old ones.

Invariants: nothing is planned before the first apply (a restart adopts a
running node and must not disturb its flows); a deletion that matches no
entry is a success; a failed deletion is logged and dropped, never retried
for ever and never allowed to fail the apply (the rules are right; only
some flows stay where they were until their entries time out).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import trio

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import CommandRunner
from dataplane.model.services import Backend, BackendState, Service, ServiceKey

__all__ = ["ConntrackCleaner", "ConntrackDeletion", "plan_deletions"]

log = logging.getLogger(__name__)

# Connection-oriented protocols recover by themselves (see above).
CLEANED_PROTOCOLS = frozenset({"udp", "sctp"})
# conntrack exits 1 when nothing matched; that is what we wanted.
_NOTHING_MATCHED = b"0 flow entries have been deleted"
# Deletions run side by side, this many at once (each is a short process).
_PARALLEL = 8


@dataclass(frozen=True, slots=True)
class ConntrackDeletion:
    """Delete the entries of flows to one frontend (through one backend).

    Attributes:
        family: 4 or 6.
        protocol: ``udp`` or ``sctp``.
        port: the flow's original destination port: the service port, or
            the node port.
        address: the original destination (cluster, external or load
            balancer IP); None for a node port, which any local address
            serves.
        backend: the reply source, i.e. the backend the flow was DNATed
            to, with ``backend_port``; None: every flow to the frontend.
        backend_port: the backend's port (the reply's source port).
    """

    family: int
    protocol: str
    port: int
    address: str | None = None
    backend: str | None = None
    backend_port: int | None = None

    def argv(self) -> tuple[str, ...]:
        argv = ["conntrack", "-D", "-f", "ipv6" if self.family == 6 else "ipv4"]
        argv += ["-p", self.protocol]
        if self.address is not None:
            argv += ["--orig-dst", self.address]
        argv += ["--orig-port-dst", str(self.port)]
        if self.backend is not None:
            argv += ["--reply-src", self.backend]
            if self.backend_port is not None:
                argv += ["--reply-port-src", str(self.backend_port)]
        return tuple(argv)

    def _sort_key(self) -> tuple[int, str, int, str, str, int]:
        return (
            self.family,
            self.protocol,
            self.port,
            self.address or "",
            self.backend or "",
            self.backend_port or 0,
        )


# (family, protocol, address or None, port): one frontend.
_Frontend = tuple[int, str, str | None, int]
# (address, port): one backend as the rules DNAT to it.
_Target = tuple[str, int]


def _family(address: str) -> int:
    return ipaddress.ip_address(address).version


def _targets(service: Service, backends: Iterable[Backend], port_index: int) -> set[_Target]:
    port = service.ports[port_index]
    out = set()
    for backend in backends:
        target_port = backend.port_for(port)
        if target_port is not None:
            out.add((backend.address, target_port))
    return out


def _live(service: Service | None, families: Sequence[int]) -> set[tuple[_Frontend, _Target]]:
    """(frontend, backend) pairs a UDP/SCTP flow may be DNATed along.

    A backend counts while it is serving: active or terminating, as
    kube-proxy counts it (a terminating backend keeps its flows; only
    removal or quarantine moves them). Cluster IPs lead to the backends
    their internal traffic policy allows; every other frontend may reach
    any (Local external policy still sends the node's and the pods' own
    traffic to all), so the union is what a flow could have been DNATed to.
    """
    if service is None or service.type == "ExternalName":
        return set()
    everyone = [b for b in service.backends if b.state is not BackendState.QUARANTINED]
    internal = [b for b in everyone if b.local] if service.internal_local else everyone
    pairs: set[tuple[_Frontend, _Target]] = set()
    for index, port in enumerate(service.ports):
        if port.protocol not in CLEANED_PROTOCOLS:
            continue
        to_all = _targets(service, everyone, index)
        to_internal = _targets(service, internal, index)
        fronts: list[tuple[_Frontend, set[_Target]]] = []
        for vip in service.cluster_ips:
            fronts.append(((_family(vip), port.protocol, vip, port.port), to_internal))
        for address in (*service.external_ips, *service.load_balancer_ips):
            fronts.append(((_family(address), port.protocol, address, port.port), to_all))
        if port.node_port:
            for family in families:
                fronts.append(((family, port.protocol, None, port.node_port), to_all))
        for front, targets in fronts:
            if front[0] not in families:
                continue
            pairs.update((front, t) for t in targets if _family(t[0]) == front[0])
    return pairs


def plan_deletions(
    old: Service | None, new: Service | None, families: Sequence[int] = (4, 6)
) -> tuple[ConntrackDeletion, ...]:
    """What to delete once ``new`` replaced ``old`` in the kernel's rules.

    ``None`` stands for "no such service" (created, or removed). Only UDP
    and SCTP frontends, only the IP ``families`` the node programs:

    * a (frontend, backend) pair that served before and does not now --
      a removed or quarantined backend, a changed target port, a removed
      frontend or service: that pair's entries;
    * a frontend that had no backend and now has one: all its entries.

    Returns a sorted tuple, so equal inputs give equal plans.
    """
    before = _live(old, families)
    after = _live(new, families)
    out = {
        ConntrackDeletion(front[0], front[1], front[3], front[2], target[0], target[1])
        for front, target in before - after
    }
    served_before = {front for front, _ in before}
    for front in {front for front, _ in after} - served_before:
        out.add(ConntrackDeletion(front[0], front[1], front[3], front[2]))
    return tuple(sorted(out, key=ConntrackDeletion._sort_key))


class ConntrackCleaner:
    """Runs the plans of service changes after each apply's iptables writes.

    Args:
        runner: runs ``conntrack`` (in the node's namespace).
    """

    def __init__(self, runner: CommandRunner) -> None:
        self._runner = runner
        self._seen: dict[ServiceKey, Service] = {}
        self._pending: dict[ConntrackDeletion, None] = {}  # ordered, deduplicated
        self._baseline = False

    @property
    def pending(self) -> tuple[ConntrackDeletion, ...]:
        """Deletions waiting for the next :meth:`apply`."""
        return tuple(self._pending)

    def observe(self, key: ServiceKey, service: Service | None, families: Sequence[int]) -> None:
        """The rules of ``key`` are being rewritten to ``service`` (None: removed)."""
        old = self._seen.pop(key, None)
        if service is not None:
            self._seen[key] = service
        if self._baseline:
            self._pending.update(dict.fromkeys(plan_deletions(old, service, families)))

    async def apply(self) -> None:
        """Delete what the observed changes planned; call after the iptables writes."""
        self._baseline = True
        pending, self._pending = list(self._pending), {}
        if not pending:
            return
        limiter = trio.CapacityLimiter(_PARALLEL)

        async def run(deletion: ConntrackDeletion) -> None:
            async with limiter:
                await self._delete(deletion)

        async with trio.open_nursery() as nursery:
            for deletion in pending:
                nursery.start_soon(run, deletion)

    async def _delete(self, deletion: ConntrackDeletion) -> None:
        argv = deletion.argv()
        try:
            result = await self._runner.run(argv, check=False)
        except ProgrammingError as exc:
            log.warning("conntrack cleanup failed (%s): %s", " ".join(argv), exc)
            return
        if result.returncode == 0 or _NOTHING_MATCHED in result.stderr:
            return
        message = result.stderr.decode(errors="replace").strip().replace("\n", " | ")[:300]
        log.warning(
            "conntrack cleanup failed (%s): exit %d: %s; those flows keep their old"
            " backend until their entries expire",
            " ".join(argv),
            result.returncode,
            message,
        )
