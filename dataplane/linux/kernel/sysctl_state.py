"""What global sysctls held before the driver changed them, kept in a small file.

The driver turns on IPv4 and IPv6 forwarding for the whole host (pods are
routed). ``cleanup`` must put back what it found, and it usually runs as a
separate process long after the driver stopped, so the original values
live in a file, not in memory. Invariants:

* A value is recorded only when the driver is about to change it, *before*
  it writes (a crash in between leaves a record of a change never made;
  cleanup then finds the value is not the one we set and leaves it).
* The first record wins: a restarted driver finds its own value and
  records nothing, so the operator's original survives restarts.
* Cleanup writes an original back only where the sysctl still holds the
  value we set; an operator who changed it since keeps their value.

The file is rewritten atomically (a reader sees the old records or the
new), and removed once nothing is left to restore.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

__all__ = ["DEFAULT_SYSCTL_STATE", "SysctlOriginals"]

log = logging.getLogger(__name__)

# Beside other node state that must outlive the process (as kubelet's and
# Calico's own under /var/lib); --sysctl-state overrides it.
DEFAULT_SYSCTL_STATE = Path("/var/lib/dataplane/sysctls.json")


class SysctlOriginals:
    """sysctl key -> (value found, value we set), saved to ``path`` (None: memory only)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._changed: dict[str, tuple[str, str]] = {}
        if path is not None and path.exists():
            try:
                data = json.loads(path.read_text())
                self._changed = {
                    str(key): (str(entry["original"]), str(entry["ours"]))
                    for key, entry in data["sysctls"].items()
                }
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
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

    def _save(self) -> None:
        if self.path is None:
            return
        if not self._changed:
            self.path.unlink(missing_ok=True)
            return
        entries = {k: {"original": o, "ours": s} for k, (o, s) in self._changed.items()}
        text = json.dumps({"sysctls": entries}, indent=1, sort_keys=True) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        temp.write_text(text)
        os.replace(temp, self.path)
