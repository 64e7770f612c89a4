"""Chain names: readable where they fit, hashed where they do not.

iptables chain names are at most 28 characters. Endpoint chains embed the
interface name (at most 15); policy and profile chains embed the policy's
name when it fits and a hash of it otherwise (marked by a leading "_", which
no Kubernetes or Calico name can start with, so the two never collide).
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass

from dataplane.model import PolicyKey

__all__ = ["MAX_CHAIN_NAME", "ChainNames"]

MAX_CHAIN_NAME = 28
_SAFE = re.compile(r"[A-Za-z0-9._-]+")


def _short_hash(text: str, length: int) -> str:
    digest = hashlib.sha224(text.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode()[:length]


@dataclass(frozen=True, slots=True)
class ChainNames:
    prefix: str = "cali-"

    def _named(self, kind: str, ident: str) -> str:
        head = f"{self.prefix}{kind}-"
        room = MAX_CHAIN_NAME - len(head)
        if len(ident) <= room and _SAFE.fullmatch(ident) and not ident.startswith("_"):
            return head + ident
        return head + "_" + _short_hash(ident, room - 1)

    def policy(self, key: PolicyKey, inbound: bool) -> str:
        ident = f"{key.namespace}/{key.name}" if key.namespace else key.name
        if key.kind:
            ident = f"{key.kind}:{ident}"
        # Readable only for the plain case; anything with scope goes hashed.
        if key.namespace or key.kind:
            return self._named("pi" if inbound else "po", "_" + ident)
        return self._named("pi" if inbound else "po", ident)

    def profile(self, name: str, inbound: bool) -> str:
        return self._named("pri" if inbound else "pro", name)

    def to_workload(self, iface: str) -> str:
        return f"{self.prefix}tw-{iface}"

    def from_workload(self, iface: str) -> str:
        return f"{self.prefix}fw-{iface}"

    def shared_workload(self, digest: str, inbound: bool) -> str:
        """A workload chain every endpoint with the same policy shares
        (nftables), named by a digest of what it holds."""
        return self._named("tws" if inbound else "fws", digest)

    def to_host_endpoint(self, iface: str) -> str:
        return f"{self.prefix}th-{iface}"

    def from_host_endpoint(self, iface: str) -> str:
        return f"{self.prefix}fh-{iface}"

    def dispatch_child(self, kind: str, branch: str) -> str:
        return self._named(kind, branch)

    def top(self, name: str) -> str:
        """Our top-level chain for a kernel hook, e.g. cali-FORWARD."""
        return f"{self.prefix}{name}"
