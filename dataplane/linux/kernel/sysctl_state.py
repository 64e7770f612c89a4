"""What global sysctls held before the driver changed them, kept in a small file.

The driver turns on IPv4 and IPv6 forwarding for its network namespace
(pods are routed). ``cleanup`` must put back what it found, and it usually
runs as a separate process long after the driver stopped, so the original
values live in a file, not in memory. Invariants:

* Records are kept per network namespace, keyed by the namespace's
  identity (this boot's id and the kernel's namespace cookie, never
  reused within a boot; not its name, which another namespace can take),
  and a cleanup restores only the records of the namespace it runs in:
  one file serves every namespace, and a record taken in one never
  writes into another (the host's forwarding, say).
* A value is recorded only when the driver is about to change it, *before*
  it writes (a crash in between leaves a record of a change never made;
  cleanup then finds the value is not the one we set and leaves it).
* The first record wins: a restarted driver finds its own value and
  records nothing, so the operator's original survives restarts.
* Cleanup writes an original back only where the sysctl still holds the
  value we set; an operator who changed it since keeps their value.

Several drivers (one per namespace) may share the file: every save reads
it again under an exclusive lock and replaces only this namespace's
entry. It is rewritten atomically (a reader sees the old records or the
new), entries of an earlier boot are dropped (their namespaces are gone),
and the file is removed once nothing is left to restore.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_SYSCTL_STATE", "SysctlOriginals", "namespace_identity"]

log = logging.getLogger(__name__)

# Beside other node state that must outlive the process (as kubelet's and
# Calico's own under /var/lib); --sysctl-state overrides it.
DEFAULT_SYSCTL_STATE = Path("/var/lib/dataplane/sysctls.json")

_SO_NETNS_COOKIE = 71  # linux/socket.h (5.14 and later); Python names it only from 3.13
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def namespace_identity() -> str:
    """This process's network namespace: ``<boot id>/cookie:<n>``.

    The cookie is never reused within a boot; a kernel without it
    (before 5.14) gives the namespace file's inode, which the kernel may
    reuse once that namespace is gone.
    """
    boot = _BOOT_ID.read_text().strip()
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            raw = s.getsockopt(socket.SOL_SOCKET, _SO_NETNS_COOKIE, 8)
        return f"{boot}/cookie:{int.from_bytes(raw, 'little')}"
    except OSError:
        return f"{boot}/inode:{os.stat('/proc/self/ns/net').st_ino}"


def _boot(identity: str) -> str:
    return identity.split("/", 1)[0]


class SysctlOriginals:
    """This namespace's sysctl key -> (value found, value we set), saved to ``path``.

    Args:
        path: the shared file; None keeps the records in memory only.
        namespace: the identity of the namespace the sysctls are read and
            written in (:func:`namespace_identity`, injected by tests).
    """

    def __init__(self, path: Path | None = None, *, namespace: str = "") -> None:
        self.path = path
        self.namespace = namespace
        self._changed: dict[str, tuple[str, str]] = {}
        if path is None:
            return
        entry = self._entries().get(namespace)
        if entry is None:
            return
        try:
            self._changed = {
                str(key): (str(value["original"]), str(value["ours"]))
                for key, value in entry["sysctls"].items()
            }
        except (KeyError, TypeError, AttributeError) as exc:
            # Without the records no original is known: cleanup restores
            # nothing rather than guess an operator's value.
            log.error("%s unreadable (%s): no sysctl will be restored", path, exc)

    def __contains__(self, key: object) -> bool:
        return key in self._changed

    def items(self) -> list[tuple[str, str, str]]:
        """(key, original, ours) for every recorded change, by key."""
        return [(key, *self._changed[key]) for key in sorted(self._changed)]

    def record(self, key: str, original: str, ours: str) -> None:
        """Remember ``original`` before ``key`` is set to ``ours``; saved at once."""
        if key in self._changed:
            return
        self._changed[key] = (original, ours)
        self._save()

    def forget(self, key: str) -> None:
        if self._changed.pop(key, None) is not None:
            self._save()

    def _entries(self) -> dict[str, Any]:
        """Every namespace's entry in the file now; {} when none can be read."""
        assert self.path is not None
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.error("%s unreadable (%s): no sysctl will be restored", self.path, exc)
            return {}
        entries = data.get("namespaces") if isinstance(data, dict) else None
        if not isinstance(entries, dict):
            # Records without a namespace cannot be put back anywhere safely.
            log.error("%s holds no per-namespace records: no sysctl will be restored", self.path)
            return {}
        return entries

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(f".{self.path.name}.lock")
        with lock.open("a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def _save(self) -> None:
        if self.path is None:
            return
        with self._locked():
            boot = _boot(self.namespace)
            entries = {ns: entry for ns, entry in self._entries().items() if _boot(ns) == boot}
            entries.pop(self.namespace, None)
            if self._changed:
                entries[self.namespace] = {
                    "sysctls": {
                        k: {"original": o, "ours": s} for k, (o, s) in self._changed.items()
                    }
                }
            if not entries:
                self.path.unlink(missing_ok=True)
                return
            text = json.dumps({"namespaces": entries}, indent=1, sort_keys=True) + "\n"
            temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            temp.write_text(text)
            os.replace(temp, self.path)
