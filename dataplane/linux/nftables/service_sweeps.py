"""ClientIP affinity's remembered entries, swept where clients may no longer go.

ClientIP affinity is remembered by the packet path, in maps we never
write but to sweep them: when an affinity frontend's backends narrow (a
backend gone, a policy now Local, affinity off), after the write that
stops new entries pointing there, the maps are read back (in a worker
thread) and the entries no longer allowed deleted; after a resync or a
restart, every entry is checked.

A mixin over :class:`~dataplane.linux.nftables.service_table.ServiceTable`'s state.
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Mapping
from typing import TYPE_CHECKING

import trio

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.errors import KERNEL_ERRORS
from dataplane.linux.nftables.elements import ElementChange, encoded
from dataplane.linux.nftables.reader import TableSource
from dataplane.linux.nftables.service_layout import (
    Affinity,
    Contribution,
    FrontendElements,
    ServiceLayout,
)
from dataplane.model.services import Service, ServiceKey

__all__ = ["AffinitySweeps", "Sticky"]

# An affinity frontend: (node port?, its key).
Sticky = tuple[bool, bytes]
# Entries that expire between the sweep's read and its delete make the
# kernel refuse the delete (ENOENT); read again, this many times at most.
_SWEEP_ATTEMPTS = 3


class AffinitySweeps:
    """The sweep methods of :class:`~dataplane.linux.nftables.service_table.ServiceTable`."""

    layout: ServiceLayout
    swept: int
    _reader: TableSource
    _services: dict[ServiceKey, Service]
    _claims: dict[bytes, set[ServiceKey]]
    _pools: tuple[str, ...]
    _sweeps: set[Sticky]
    _sweep_all: bool
    _timeouts: set[int]

    if TYPE_CHECKING:  # the table's own

        async def _write(self, changes: list[ElementChange]) -> None: ...

        def _contribution(self, key: ServiceKey) -> Contribution: ...

    def _affinity_of(self, sticky: Sticky) -> Affinity | None:
        """The affinity of a frontend as in force now (None: none)."""
        node_port, key = sticky
        frontend = self._in_force(
            (b"n" if node_port else b"r") + key
        )  # as contribution() names them
        return frontend.affinity if frontend else None

    def _sticky(self) -> dict[Sticky, Affinity]:
        """Every affinity frontend in force."""
        out: dict[Sticky, Affinity] = {}
        if not self._timeouts:
            # No service has had affinity (its timeout would be here): no
            # frontend to look at (10,000 looked at cost 80 ms of a start).
            return out
        for ident, claims in self._claims.items():
            owner = min(claims)
            if not self._services[owner].session_affinity:
                continue  # (its elements are made only for services with affinity)
            affinity = self._contribution(owner).frontends[ident].affinity
            if affinity is not None:
                out[(affinity.node_port, affinity.key)] = affinity
        return out

    def _in_force(self, ident: bytes) -> FrontendElements | None:
        """Frontend ``ident`` as its owner (the lowest-named claim) has it."""
        claims = self._claims.get(ident)
        return self._contribution(min(claims)).frontends[ident] if claims else None

    async def _sweep(self) -> int:
        """Delete the affinity entries that point where their frontend's
        clients may no longer go (after the write that stops new ones being
        recorded); how many.

        Raises:
            ProgrammingError: the kernel refused the read or the delete
                (the sweep stays due).
        """
        if not (self._sweep_all or self._sweeps):
            return 0
        # Taken now: a change while the maps are read is the next sweep's.
        everything, self._sweep_all = self._sweep_all, False
        taken, self._sweeps = self._sweeps, set()
        # Judged by what is in force now, not when the frontend narrowed.
        rules: dict[Sticky, Affinity | None] = {}
        rules.update(self._sticky() if everything else {s: self._affinity_of(s) for s in taken})
        pools = [ipaddress.ip_network(p) for p in self._pools]
        changes: list[ElementChange] = []
        for attempt in range(_SWEEP_ATTEMPTS):
            try:
                changes = await trio.to_thread.run_sync(self._stale, rules, everything, pools)
                if changes:
                    await self._write(changes)
                break
            except KERNEL_ERRORS as exc:
                expired = isinstance(exc, OSError) and exc.errno == errno.ENOENT
                if expired and attempt + 1 < _SWEEP_ATTEMPTS:
                    continue  # an entry expired in between: read again
                self._sweep_all |= everything
                self._sweeps |= taken
                raise ProgrammingError(
                    f"the kernel refused the {self.layout.family} {self.layout.table}"
                    f" affinity sweep: {exc}"
                ) from exc
        count = sum(len(c.elements) for c in changes)
        self.swept += count
        return count

    def _stale(
        self,
        rules: Mapping[Sticky, Affinity | None],
        everything: bool,
        pools: list[ipaddress.IPv4Network | ipaddress.IPv6Network],
    ) -> list[ElementChange]:
        """The deletes of every stale entry (in a worker thread: the maps
        hold up to AFFINITY_SIZE entries each)."""
        family, table = self.layout.nfproto, self.layout.table
        width = 4 if self.layout.version == 4 else 16  # the client's address, first
        changes = []
        for node_port, prefix in ((False, ""), (True, "np_")):
            held = {
                name: {
                    e.key: e.data
                    for e in self._reader.elements(family, table, f"{prefix}aff_{name}")
                }
                for name in ("addr", "port")
            }
            doomed = []
            for entry in held["addr"].keys() | held["port"].keys():
                client, frontend = entry[:width], entry[width:]
                if (node_port, frontend) not in rules and not everything:
                    continue
                rule = rules.get((node_port, frontend))
                target = (held["addr"].get(entry, b""), held["port"].get(entry, b""))
                address = ipaddress.ip_address(client)
                if rule is None or not rule.allows(
                    target, from_pools=any(address in p for p in pools)
                ):
                    doomed.append(entry)
            for name in ("addr", "port"):
                gone = tuple(encoded(e) for e in doomed if e in held[name])
                if gone:
                    changes.append(
                        ElementChange("delete", family, table, f"{prefix}aff_{name}", gone)
                    )
        return changes
