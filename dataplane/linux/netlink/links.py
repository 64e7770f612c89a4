"""LinkMonitor: the node's interfaces and their state, kept by netlink events.

Reading every link still costs milliseconds on a node with thousands of
interfaces (even the lean dump of :mod:`dataplane.linux.netlink.dump`),
so the monitor reads them all only at start
and when the platform's route refresh asks for it, and otherwise follows
the kernel's RTM_NEWLINK / RTM_DELLINK notifications. Each notification
updates one entry and pokes the platform, which wakes the main loop so an
endpoint's oper status (or the route for a just-created interface) follows
within moments, without polling.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import trio

__all__ = [
    "LinkMonitor",
    "LinkState",
    "LinkWatch",
]

log = logging.getLogger(__name__)

_IFF_UP = 1
_RTMGRP_LINK = 1


class _Netlink(Protocol):
    def get_links(self) -> Any: ...

    def bind(self, groups: int = ...) -> Any: ...

    def get(self) -> Any: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class LinkState:
    index: int
    up: bool  # administratively up and carrier present
    mtu: int = 0


def _parse(link: Any) -> tuple[str, LinkState] | None:
    name = link.get("ifname")
    if not name:
        return None
    up = bool(link["flags"] & _IFF_UP) and link.get("operstate") in ("UP", "UNKNOWN")
    mtu = link.get("mtu") or link.get("IFLA_MTU") or 0
    return name, LinkState(link["index"], up, int(mtu))


class LinkMonitor:
    def __init__(self, netlink: Callable[[], Any]) -> None:
        self._factory = netlink
        self.links: dict[str, LinkState] = {}
        # Counts changes to ``links`` (a full read counts as one): a reader
        # that saw this value knows nothing changed since. A changed link's
        # LinkState is always a new object.
        self.generation = 0
        self._stale = True

    def mark_stale(self) -> None:
        """Read every link again at the next :meth:`refresh` (a refresh timer)."""
        self._stale = True

    def refresh(self) -> None:
        """Blocking: the full read, if one is due. Called from a worker thread."""
        if not self._stale:
            return
        handle = self._factory()
        try:
            self.links = dict(p for p in map(_parse, handle.get_links()) if p)
        finally:
            handle.close()
        self.generation += 1
        self._stale = False

    def apply_events(self, messages: Iterable[Any]) -> bool:
        """Fold link notifications in; True if any link changed."""
        changed = False
        for msg in messages:
            event = msg.get("event")
            if event not in ("RTM_NEWLINK", "RTM_DELLINK"):
                continue
            parsed = _parse(msg)
            if parsed is None:
                continue
            name, state = parsed
            if event == "RTM_DELLINK":
                changed |= self.links.pop(name, None) is not None
            elif self.links.get(name) != state:
                self.links[name] = state
                changed = True
        self.generation += changed
        return changed

    def _listen(self, deliver: Callable[[Any], None]) -> None:
        """Blocking, in one worker thread for its whole life: pyroute2's handle
        only works from the thread that created it."""
        handle: _Netlink = self._factory()
        try:
            # Link notifications only: the default groups would also deliver
            # every route and address change, including all of our own.
            handle.bind(groups=_RTMGRP_LINK)
            while True:
                try:
                    messages = handle.get()
                except OSError as exc:
                    if exc.errno != errno.ENOBUFS:
                        raise
                    # The kernel dropped notifications (a burst of thousands
                    # of interfaces): we no longer know the truth, so read
                    # everything again and keep listening.
                    messages = None
                trio.from_thread.run_sync(deliver, messages)
        except trio.RunFinishedError:
            return  # the driver is stopping
        finally:
            handle.close()

    async def watch(self, on_change: Callable[[], None]) -> None:
        """Follow link notifications forever, calling ``on_change`` on changes."""

        def deliver(messages: Any) -> None:
            if messages is None:
                self.mark_stale()
                on_change()
            elif self.apply_events(messages):
                on_change()

        try:
            await trio.to_thread.run_sync(self._listen, deliver, abandon_on_cancel=True)
        except OSError as exc:
            # Without notifications the route refresh timer still re-reads
            # links; status just follows more slowly. Say so once.
            log.warning("link monitor stopped (%s); falling back to refresh timers", exc)
            self.mark_stale()


class LinkWatch:
    """Some interfaces' links as a reader last looked at them; after links
    change (:attr:`LinkMonitor.generation`), which of them are other
    objects now (added, gone, renumbered, up or down).

    The route programmer and the endpoint statuses each follow the
    interfaces they depend on, so a change of links costs a comparison per
    followed interface, and only when something changed.
    """

    def __init__(self, monitor: LinkMonitor) -> None:
        self._monitor = monitor
        self._seen: dict[str, LinkState | None] = {}
        self._generation = -1

    def look(self, names: Iterable[str]) -> None:
        """Follow exactly ``names``, from their links as they are now."""
        links = self._monitor.links
        self._seen = {name: links.get(name) for name in names}
        self._generation = self._monitor.generation

    def follow(self, name: str) -> None:
        """Follow ``name`` too, from its link as it is now (if not followed yet)."""
        if name not in self._seen:
            self._seen[name] = self._monitor.links.get(name)

    def forget(self, name: str) -> None:
        self._seen.pop(name, None)

    def changed(self) -> list[str]:
        """The followed interfaces whose link changed since they were looked at."""
        generation = self._monitor.generation
        if generation == self._generation:
            return []
        self._generation = generation
        links = self._monitor.links
        out = []
        for name, link in self._seen.items():
            now = links.get(name)
            if now is not link:
                self._seen[name] = now
                out.append(name)
        return out
