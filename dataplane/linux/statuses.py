"""EndpointStatuses: each endpoint's oper-status, kept as endpoints, links and refusals change.

A workload is up when Felix says it is active and its interface exists
and is up; a host endpoint when its interface is up (one for all
interfaces always is). Either reports ``error`` while something of it is
held back (the platform's reports say which). After each apply only the
endpoints touched since the last, those on an interface whose link changed
and those entering or leaving ``error`` are looked at again, and the
:class:`~dataplane.core.status_book.StatusBook` tells the reporter which
of them changed: a new pod costs its own status, not the node's.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from dataplane.core.platform import EndpointKey
from dataplane.core.status_book import StatusBook
from dataplane.linux.netlink.links import LinkMonitor, LinkState, LinkWatch
from dataplane.linux.writers.hosts import HostEndpointWriter
from dataplane.linux.writers.workloads import WorkloadWriter
from dataplane.model import EndpointStatus, HostEndpointKey

__all__ = ["EndpointStatuses"]


class EndpointStatuses:
    def __init__(self, links: LinkMonitor) -> None:
        self.book = StatusBook()
        self._links = links
        self._touched: set[EndpointKey] = set()
        self._on: dict[str, set[EndpointKey]] = {}  # interface -> endpoints on it
        self._interface: dict[EndpointKey, str] = {}
        self._watch = LinkWatch(links)  # the links of the interfaces in _on
        self._failing: frozenset[EndpointKey] = frozenset()

    def touch(self, key: EndpointKey) -> None:
        """``key`` was set or removed: look at it at the next update."""
        self._touched.add(key)

    def update(
        self,
        workloads: WorkloadWriter,
        hosts: HostEndpointWriter,
        failing: AbstractSet[EndpointKey],
    ) -> StatusBook:
        """Bring the book up to date (after an apply); ``failing``: the
        endpoints with something held back now."""
        look = self._touched
        self._touched = set()
        now = frozenset(failing)
        look |= now ^ self._failing
        self._failing = now
        state = self._links.links
        for iface in self._watch.changed():
            look |= self._on[iface]
        book = self.book
        for key in look:
            if isinstance(key, HostEndpointKey):
                host = hosts.get(key)
                name = None if host is None else host.name
                up = host is not None and (not name or self._link_up(name, state))
            else:
                workload = workloads.get(key)
                name = None if workload is None else workload.name
                up = workload is not None and workload.admin_up and self._link_up(name, state)
            self._index(key, name)
            if name is None:
                book.remove(key)
            elif key in now:
                book.set(key, EndpointStatus.ERROR)
            else:
                book.set(key, EndpointStatus.UP if up else EndpointStatus.DOWN)
        return book

    def _link_up(self, name: str | None, state: dict[str, LinkState]) -> bool:
        link = state.get(name or "")
        return link is not None and link.up

    def _index(self, key: EndpointKey, name: str | None) -> None:
        """Which interface ``key`` is on now (None: it is gone)."""
        old = self._interface.get(key)
        if old == name:
            return
        if old is not None:
            keys = self._on[old]
            keys.discard(key)
            if not keys:
                del self._on[old]
                self._watch.forget(old)
        if name is None:
            self._interface.pop(key, None)
            return
        self._interface[key] = name
        if name not in self._on:
            self._on[name] = set()
            self._watch.follow(name)  # looked at now; a later change is news
        self._on[name].add(key)
