"""Interface and global sysctls, written where Felix writes them.

A pod is wired the Calico way (its address/32, default route via
169.254.1.1 on the link), so the host side of its veth must answer ARP for
any address it can route (proxy_arp, with no delay) and forward. The files
are written only when the interface is new to us (or on a refresh), so an
apply with thousands of endpoints does not rewrite thousands of files.

Global forwarding is the host's, not ours: the value found before we turn
it on is recorded (:class:`SysctlOriginals`, a file that outlives the
process) and ``cleanup`` puts it back where it still holds our value.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable
from pathlib import Path

import trio

from dataplane.core.quarantine import Unsaid
from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.sysctl_state import SysctlOriginals

__all__ = ["SysctlWriter"]

log = logging.getLogger(__name__)

_IPV4_IFACE = {
    "net/ipv4/conf/{}/forwarding": "1",
    "net/ipv4/conf/{}/proxy_arp": "1",
    "net/ipv4/neigh/{}/proxy_delay": "0",
}
_IPV6_IFACE = {
    "net/ipv6/conf/{}/forwarding": "1",
    "net/ipv6/conf/{}/accept_ra": "0",
}
_RP_FILTER = "net/ipv4/conf/{}/rp_filter"
# Kernel defaults, restored by cleanup on interfaces that remain.
_CLEANUP = {
    "net/ipv4/conf/{}/proxy_arp": "0",
    "net/ipv4/neigh/{}/proxy_delay": "80",
}
_GLOBAL_V4 = {"net/ipv4/ip_forward": "1"}
_GLOBAL_V6 = {"net/ipv6/conf/all/forwarding": "1"}


# A sysctl file read and written with the os module's calls, not pathlib's
# text files: 7 against 37 us a read and 8 against 29 us a write, on a
# node whose thousand interfaces have six files each.
def _read_file(path: str) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 4096).decode()
    finally:
        os.close(fd)


def _write_file(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


class SysctlWriter:
    def __init__(
        self,
        root: str | Path = "/proc/sys",
        *,
        ipv6: bool = True,
        forwarding: bool = True,
        originals: SysctlOriginals | None = None,
    ) -> None:
        self.root = Path(root)
        self.ipv6 = ipv6
        # Felix's IPForwarding: Disabled leaves the node's forwarding as it
        # finds it (the operator's to set), Enabled turns it on.
        self.forwarding = forwarding
        self.originals = originals if originals is not None else SysctlOriginals()
        self._done: dict[str, tuple[int, bool]] = {}  # iface -> (ifindex, strict rpf)
        self.failed: dict[str, str] = {}  # iface -> why, as of the last apply
        self._unsaid: Unsaid[str] = Unsaid()  # what take_refusals has not returned yet
        self.writes = 0  # files written so far (metrics); read from the loop after apply
        self._ahead: dict[str, str] = {}  # path -> value, read ahead for the next apply

    def _write(self, key: str, value: str) -> None:
        path = f"{self.root}/{key}"
        try:
            found = self._ahead.pop(path, None)
            if (found if found is not None else _read_file(path).strip()) == value:
                return
            _write_file(path, value)
            self.writes += 1
        except FileNotFoundError:
            return  # interface went away, or IPv6 disabled: nothing to configure
        except OSError as exc:
            raise ProgrammingError(f"sysctl {key}={value}: {exc}") from exc

    def _read(self, key: str) -> str | None:
        try:
            return _read_file(f"{self.root}/{key}").strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ProgrammingError(f"sysctl {key}: {exc}") from exc

    def _write_global(self, key: str, value: str) -> None:
        found = self._read(key)
        if found is None or found == value:
            return
        self.originals.record(key, found, value)  # before the write: see sysctl_state
        self._write(key, value)

    def _globals(self) -> dict[str, str]:
        if not self.forwarding:
            return {}
        return {**_GLOBAL_V4, **(_GLOBAL_V6 if self.ipv6 else {})}

    def _settings(self, iface: str, strict_rpf: bool) -> dict[str, str]:
        """Each file of ``iface`` we set, and its value."""
        settings = {key.format(iface): value for key, value in _IPV4_IFACE.items()}
        # Strict reverse-path filtering backs up the anti-spoofing rules,
        # unless the endpoint may legitimately send from other addresses.
        settings[_RP_FILTER.format(iface)] = "1" if strict_rpf else "0"
        if self.ipv6:
            settings.update((key.format(iface), value) for key, value in _IPV6_IFACE.items())
        return settings

    def _configure(self, iface: str, strict_rpf: bool) -> None:
        for key, value in self._settings(iface, strict_rpf).items():
            self._write(key, value)

    def _due(self, wanted: dict[str, tuple[int, bool]]) -> list[tuple[str, tuple[int, bool]]]:
        """The interfaces whose files an apply of ``wanted`` writes (and
        a read-ahead reads): those not done in the same state."""
        return [(iface, state) for iface, state in wanted.items() if self._done.get(iface) != state]

    def _sync(self, wanted: dict[str, tuple[int, bool]]) -> None:
        for key, value in self._globals().items():
            self._write_global(key, value)
        failed: dict[str, str] = {}
        for iface, state in self._due(wanted):
            # One interface that refuses a setting never blocks the
            # others; it is tried again at the next apply.
            try:
                self._configure(iface, state[1])
            except ProgrammingError as exc:
                failed[iface] = str(exc)
                continue
            self._done[iface] = state
        self.failed = failed
        self._ahead = {}  # what this apply did not use is stale by the next
        for iface in [i for i in self._done if i not in wanted]:
            del self._done[iface]

    def _read_ahead(self, wanted: dict[str, tuple[int, bool]]) -> None:
        ahead: dict[str, str] = {}
        for iface, state in self._due(wanted):
            for key in self._settings(iface, state[1]):
                path = f"{self.root}/{key}"
                with contextlib.suppress(OSError):  # the apply reads it, and says why
                    ahead[path] = _read_file(path).strip()
        self._ahead = ahead

    def held_back(self) -> dict[str, str]:
        """Interfaces whose settings the last apply could not write, and why."""
        return dict(self.failed)

    def take_refusals(self) -> list[tuple[str, str]]:
        """(iface, why) failing since the last call, or failing for a new reason."""
        return self._unsaid.news(self.failed)

    async def apply(self, interfaces: Iterable[tuple[str, int, bool]]) -> None:
        """Configure each (name, ifindex, strict_rpf) interface that is new or changed."""
        wanted = {name: (index, strict) for name, index, strict in interfaces}
        await trio.to_thread.run_sync(self._sync, wanted)

    async def read_ahead(self, interfaces: Iterable[tuple[str, int, bool]]) -> None:
        """Read now the files :meth:`apply` of the same interfaces would
        read (while the rules commit, when reading costs nothing): it then
        writes those that differ without reading them again. A read that
        fails is left to the apply."""
        wanted = {name: (index, strict) for name, index, strict in interfaces}
        await trio.to_thread.run_sync(self._read_ahead, wanted)

    def forget_ahead(self) -> None:
        """Drop what was read ahead for an apply that never reached the
        sysctls (it failed before): a later apply reads for itself."""
        self._ahead = {}

    def mark_for_resync(self) -> None:
        self._done.clear()

    async def cleanup(self, interfaces: Iterable[str]) -> None:
        """Return our per-interface settings to kernel defaults, globals to what we found."""

        def work() -> None:
            for iface in interfaces:
                for key, value in _CLEANUP.items():
                    self._write(key.format(iface), value)
            self._restore_globals()

        await trio.to_thread.run_sync(work)
        self._done.clear()

    def _restore_globals(self) -> None:
        for key, original, ours in self.originals.items():
            now = self._read(key)
            if now == ours:
                self._write(key, original)
                log.info("sysctl %s restored to %s, as found before we set it", key, original)
            elif now is not None:
                # Changed since we set it: the operator's value, not ours to undo.
                log.info("sysctl %s left at %s: changed since we set it to %s", key, now, ours)
            self.originals.forget(key)
