"""RouteProgrammer: the routes we own, and the links they use.

Routes to each local workload address go via its interface (scope link);
routes to other nodes' blocks via the VXLAN device or a node address, and
our own blocks are blackholed (:mod:`dataplane.linux.netlink.route_target`). All
are tagged with our route protocol number: the tag is how we find ours
again, remove stale ones, and never touch anyone else's (BIRD's, the
kernel's). The whole-table read is a lean netlink dump
(:mod:`dataplane.linux.netlink.dump`) and writes go many per system call
(:mod:`dataplane.linux.netlink.batch`); both block, so they run in a
worker thread.

A route whose interface does not exist yet (the CNI plugin has not created
it, or the VXLAN device is not up yet) cannot be added; it stays pending
and the programmer reports that, so the platform retries shortly instead
of waiting for a refresh.
"""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import trio

from dataplane.core.quarantine import Quarantine
from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.errors import KERNEL_ERRORS
from dataplane.linux.netlink.batch import NetlinkBatch, NetlinkWriter, RouteRequest
from dataplane.linux.netlink.links import LinkMonitor, LinkState, LinkWatch
from dataplane.linux.netlink.route_target import RouteKind, RouteTarget

__all__ = ["NetlinkHandle", "RouteProgrammer"]

log = logging.getLogger(__name__)

_MAIN_TABLE = 254
_SCOPE_LINK = 253
_RTN_UNICAST = 1
_RTN_BLACKHOLE = 6
_RTNH_F_ONLINK = 4

# What the kernel holds for one route of ours: type, interface index (0:
# none given), gateway ("": none), onlink.
_Held = tuple[int, int, str, bool]


class NetlinkHandle(Protocol):
    """The slice of pyroute2's IPRoute we use (a fake implements the same)."""

    def get_links(self) -> Any: ...

    def get_routes(self, **kwargs: Any) -> Any: ...

    def close(self) -> None: ...


def _family(cidr: str) -> int:
    return socket.AF_INET6 if ":" in cidr else socket.AF_INET


def _satisfies(held: _Held | None, wanted: _Held) -> bool:
    """Whether the kernel's route is the one wanted; a gateway route may use
    whichever interface the kernel picked (an index of -1 in ``wanted``)."""
    if held is None:
        return False
    if wanted[1] == -1:
        return (held[0], held[2]) == (wanted[0], wanted[2])
    return held == wanted


class RouteProgrammer:
    def __init__(
        self,
        netlink: Callable[[], NetlinkHandle],
        links: LinkMonitor,
        *,
        protocol: int,
        ipv6: bool = True,
        clock: Callable[[], float] = trio.current_time,
        writer: NetlinkWriter | None = None,
    ) -> None:
        self._netlink_factory = netlink
        # Writes go many per system call.
        self._writer = writer or NetlinkBatch()
        # Routes the kernel refused (the interface went, a clash with a
        # route we do not own): kept out of the way of the others and
        # retried alone with backoff. Written from the worker thread only
        # while apply() waits for it.
        self.quarantine: Quarantine[str] = Quarantine(clock)
        self._refusals: list[tuple[str, str]] = []
        self._links = links
        self.protocol = protocol
        self.ipv6 = ipv6
        self._desired: dict[str, RouteTarget] = {}
        self._actual: dict[str, _Held] | None = None  # ours only
        self.pending: frozenset[str] = frozenset()  # cidrs waiting for an interface
        # What the next sync looks at: the CIDRs changed since the last one,
        # or None for every route (a full hand-over, a re-read, a failure).
        # A sync then costs what changed, not what is there.
        self._check: set[str] | None = None
        # The routes through each interface, and those interfaces' links as
        # last checked: when links change, only the routes through an
        # interface whose link changed are looked at again.
        self._by_device: dict[str, set[str]] = {}
        self._watch = LinkWatch(links)

    @property
    def links(self) -> Mapping[str, LinkState]:
        return self._links.links

    def set_routes(self, desired: Mapping[str, RouteTarget]) -> None:
        """Every route wanted; the next sync looks at them all."""
        for cidr in list(self.quarantine):
            if self._desired.get(cidr) != desired.get(cidr):
                self.quarantine.release(cidr)  # changed or gone: a fresh chance
        self._desired = dict(desired)
        self._by_device = {}
        for cidr, target in self._desired.items():
            if target.device:
                self._by_device.setdefault(target.device, set()).add(cidr)
        self._check = None

    def update_routes(self, changes: Mapping[str, RouteTarget | None]) -> None:
        """Some routes changed (None: no longer wanted); the next sync looks at those."""
        desired, by_device = self._desired, self._by_device
        for cidr, target in changes.items():
            old = desired.get(cidr)
            if old == target:
                continue
            if cidr in self.quarantine:
                self.quarantine.release(cidr)  # changed or gone: a fresh chance
            if old is not None and old.device:
                through = by_device[old.device]
                through.discard(cidr)
                if not through:
                    del by_device[old.device]
                    self._watch.forget(old.device)
            if target is None:
                desired.pop(cidr, None)
            else:
                desired[cidr] = target
                if target.device:
                    by_device.setdefault(target.device, set()).add(cidr)
                    self._watch.follow(target.device)
            if self._check is not None:
                self._check.add(cidr)

    def held_back(self) -> dict[str, str]:
        """Routes (by CIDR) in quarantine now, and the kernel's reason."""
        return self.quarantine.reasons()

    def take_refusals(self) -> list[tuple[str, str]]:
        """(cidr, error) of routes newly quarantined since the last call."""
        refusals, self._refusals = self._refusals, []
        return refusals

    def read_ahead(self) -> None:
        """Blocking, in a worker thread: the links, and the routes if this
        programmer knows none yet (a first apply, a resync), read now for
        the next apply -- while the rules commit, when the reads cost
        nothing. Raises what the kernel raises (the apply reads again)."""
        self._links.refresh()
        if self._actual is None:
            handle = self._netlink_factory()
            try:
                self._actual = self._read_routes(handle)
            finally:
                handle.close()
            self._check = None

    def mark_for_resync(self) -> None:
        self._actual = None
        self._check = None
        self._links.mark_stale()

    def _read_routes(self, handle: NetlinkHandle) -> dict[str, _Held]:
        out: dict[str, _Held] = {}
        families = [socket.AF_INET] + ([socket.AF_INET6] if self.ipv6 else [])
        for family in families:
            for route in handle.get_routes(family=family, table=_MAIN_TABLE):
                if route["proto"] != self.protocol or route.get("dst") is None:
                    continue
                out[f"{route.get('dst')}/{route['dst_len']}"] = (
                    route["type"],
                    route.get("oif") or 0,
                    route.get("gateway") or "",
                    bool(route["flags"] & _RTNH_F_ONLINK),
                )
        return out

    def _wanted(self, target: RouteTarget) -> _Held | None:
        """What the kernel should hold for ``target``; None while its interface is missing."""
        if target.kind is RouteKind.BLACKHOLE:
            return (_RTN_BLACKHOLE, 0, "", False)
        if target.kind is RouteKind.GATEWAY:
            return (_RTN_UNICAST, -1, target.gateway, False)  # -1: any interface
        link = self.links.get(target.device)
        if link is None:
            return None
        onlink = target.kind is RouteKind.ONLINK
        return (_RTN_UNICAST, link.index, target.gateway, onlink)

    def _sync(self, skip: frozenset[str]) -> list[tuple[str, Exception]]:
        # A handle per sync: pyroute2's handle belongs to the thread that
        # made it, and each sync may run in a different worker thread.
        handle = self._netlink_factory()
        try:
            return self._sync_with(handle, skip)
        finally:
            handle.close()

    def _sync_with(
        self, handle: NetlinkHandle, skip: frozenset[str]
    ) -> list[tuple[str, Exception]]:
        """Write the routes (but those in ``skip``); the ones refused, with why."""
        self._links.refresh()
        if self._actual is None:
            self._actual = self._read_routes(handle)
            self._check = None
        actual = self._actual
        looked_at = self._looked_at(skip)
        pending: set[str] = set() if looked_at is None else set(self.pending - looked_at)
        changes: list[tuple[str, _Held]] = []
        stale: list[str] = []
        for cidr in self._desired if looked_at is None else looked_at:
            if cidr in skip:
                continue
            target = self._desired.get(cidr)
            if target is None:
                if cidr in actual:
                    stale.append(cidr)
                continue
            if _family(cidr) == socket.AF_INET6 and not self.ipv6:
                continue
            wanted = self._wanted(target)
            if wanted is None:
                pending.add(cidr)
                continue
            if _satisfies(actual.get(cidr), wanted):
                continue
            changes.append((cidr, wanted))
        changes.sort()  # a stable order for the kernel (and for reading a trace)
        results = self._writer([self._request("replace", c, w) for c, w in changes])
        failed: list[tuple[str, Exception]] = []
        for (cidr, wanted), error in zip(changes, results, strict=True):
            if error is None:
                actual[cidr] = wanted
            else:
                failed.append((cidr, error))  # one route never blocks the others
        if len(failed) > 1 and len(failed) == len(changes):
            raise failed[0][1]  # netlink itself is failing, not one route
        if looked_at is None:
            stale = [c for c in actual if c not in self._desired]
        stale.sort()
        results = self._writer([self._request("del", c, actual[c]) for c in stale])
        for cidr, error in zip(stale, results, strict=True):
            if error is not None and error.errno != errno.ESRCH:  # already gone is success
                raise error
            del actual[cidr]
        self.pending = frozenset(pending)
        self._check = set()  # only now: a sync that raised looks at the same again
        return failed

    def _looked_at(self, skip: frozenset[str]) -> set[str] | None:
        """The CIDRs this sync must look at; None: every one.

        Those changed since the last sync, those waiting for an interface,
        those out of quarantine now, and those through an interface whose
        link changed (a new LinkState object: added, gone, renumbered,
        up or down).
        """
        if self._check is None:
            self._watch.look(self._by_device)
            return None
        # Gathered into self._check itself: a sync that raises midway
        # looks at all of it again.
        check = self._check
        check |= self.pending
        check.update(cidr for cidr in self.quarantine if cidr not in skip)
        for device in self._watch.changed():
            check.update(self._by_device.get(device, ()))
        return check

    def _request(self, command: str, cidr: str, held: _Held) -> RouteRequest:
        rtype, oif, gateway, onlink = held
        # Scope link for a plain device route, as the kernel itself writes
        # one; anything via a gateway is universe.
        scope = _SCOPE_LINK if _family(cidr) == socket.AF_INET and oif > 0 and not gateway else 0
        return RouteRequest(
            command,
            cidr,
            self.protocol,
            rtype=rtype,
            oif=max(oif, 0),
            gateway=gateway,
            onlink=onlink,
            scope=scope,
            table=_MAIN_TABLE,
        )

    async def apply(self) -> None:
        try:
            # Quarantine bookkeeping stays on this side of the thread: it
            # reads the trio clock.
            due = set(self.quarantine.due())
            skip = frozenset(c for c in self.quarantine if c not in due)
            failed = await trio.to_thread.run_sync(self._sync, skip)
        except KERNEL_ERRORS as exc:
            self.mark_for_resync()
            raise ProgrammingError(f"routes: {type(exc).__name__}: {exc}") from exc
        refused = {cidr for cidr, _ in failed}
        for cidr in due - refused:
            self.quarantine.release(cidr)
        for cidr, error in failed:
            reason = f"{type(error).__name__}: {error}"
            if self.quarantine.reject(cidr, reason):
                self._refusals.append((cidr, reason))

    async def cleanup_all(self) -> None:
        self.set_routes({})
        self.mark_for_resync()
        await self.apply()
