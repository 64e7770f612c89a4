"""The MTU file Felix writes for the CNI plugin: the pod MTU this node's overlay leaves.

Felix's internal dataplane finds the host's MTU (the smallest of the
interfaces that are up and whose names match ``MTUIfacePattern``; 1460
when none does), takes each enabled encapsulation's MTU (its setting, else
the host's less the encapsulation's header: VXLAN 50, VXLAN over IPv6 70)
and writes the smallest, or the host's with none enabled, to
``/var/lib/calico/mtu``; the Calico CNI plugin gives new pods that MTU.
With an external dataplane driver Felix writes nothing, so the driver
does, at its first apply and again whenever the value changes (a link's
MTU or the overlay). ``RequireMTUFile``: a write that fails fails the
apply (retried with backoff), as Felix refuses to start without it;
otherwise it is logged once and the node is programmed anyway.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path

from dataplane.config import Config
from dataplane.errors import ProgrammingError
from dataplane.linux.netlink.links import LinkState

__all__ = ["DEFAULT_MTU_FILE", "MtuFile", "host_mtu", "pod_mtu"]

log = logging.getLogger(__name__)

DEFAULT_MTU_FILE = Path("/var/lib/calico/mtu")
_UNDETECTED = 1460  # the smallest of the common clouds', as Felix falls back to
_VXLAN_OVERHEAD = {4: 50, 6: 70}


def host_mtu(links: Mapping[str, LinkState], pattern: str) -> int:
    """The smallest MTU of the links that are up and match ``pattern``."""
    matcher = re.compile(pattern)
    found = [s.mtu for name, s in links.items() if s.up and s.mtu and matcher.search(name)]
    return min(found) if found else _UNDETECTED


def pod_mtu(host: int, config: Config) -> int:
    """What pods get: the smallest enabled encapsulation's MTU, else the host's.

    ``config`` is the effective one (the pools' encapsulation filled in).
    """
    encapsulations = [
        config.vxlan_mtu or host - _VXLAN_OVERHEAD[4] if config.vxlan_enabled else 0,
        config.vxlan_mtu_v6 or host - _VXLAN_OVERHEAD[6] if config.vxlan_enabled_v6 else 0,
    ]
    enabled = [mtu for mtu in encapsulations if mtu]
    return min(enabled) if enabled else host


class MtuFile:
    """Writes the pod MTU to ``path`` when it changes (``None``: nowhere)."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._written: int | None = None
        self._failed: str | None = None

    def apply(self, mtu: int, *, required: bool) -> None:
        if self._path is None or mtu == self._written:
            return
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            # Whole or not at all: the CNI plugin may read it at any moment.
            partial = self._path.with_name(f".{self._path.name}.{os.getpid()}")
            partial.write_text(str(mtu), encoding="ascii")
            partial.replace(self._path)
        except OSError as exc:
            why = f"cannot write the MTU file {self._path}: {exc}"
            if required:
                raise ProgrammingError(f"{why} (RequireMTUFile)") from exc
            if why != self._failed:
                log.error("%s; new pods may get a wrong MTU", why)
                self._failed = why
            return
        self._written, self._failed = mtu, None
        log.info("pod MTU %d written to %s for the CNI plugin", mtu, self._path)
