"""HNS ACL policy values: one frozen :class:`Acl` per rule HNS holds, and its JSON.

Branches (:mod:`dataplane.windows.policy.match`) become ACLs here: source and
destination map to Local/Remote by direction (``In``: Local is the
destination, the endpoint itself; ``Out``: Local is the source), lists are
comma-separated strings as hcsshim marshals them, long address lists are cut
into chunks (Felix's 4,000 entries a rule) and a rule with several
protocols becomes one ACL per protocol, the form every HNS version takes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from dataplane.windows.hns.acl import ANY_PROTOCOL
from dataplane.windows.hns.hcn import Json
from dataplane.windows.policy.match import Branch, Side

__all__ = ["CHUNK", "Acl", "branch_acls"]

CHUNK = 4_000  # entries per list in one ACL (Microsoft: "a few thousand" at most)
# More protocols than this in one branch (a negated protocol) go as one list.
_SPLIT_PROTOCOLS = 8


@dataclass(frozen=True, slots=True, order=True)
class Acl:
    """One HNS ``ACL`` endpoint policy (``RuleType`` Switch); empty text = any."""

    priority: int
    action: str  # "Allow" | "Block"
    direction: str  # "In" | "Out"
    protocols: str = str(ANY_PROTOCOL)
    local_addresses: str = ""
    remote_addresses: str = ""
    local_ports: str = ""
    remote_ports: str = ""

    def policy(self) -> Json:
        """The policy as sent in ``ModifyEndpoint`` (hcsshim's keys, omitempty)."""
        settings: Json = {
            "Protocols": self.protocols,
            "Action": self.action,
            "Direction": self.direction,
            "LocalAddresses": self.local_addresses,
            "RemoteAddresses": self.remote_addresses,
            "LocalPorts": self.local_ports,
            "RemotePorts": self.remote_ports,
            "RuleType": "Switch",
            "Priority": self.priority,
        }
        return {"Type": "ACL", "Settings": {k: v for k, v in settings.items() if v != ""}}

    def __str__(self) -> str:
        parts = [f"{self.priority:5d} {self.direction:3s} {self.action:5s} proto {self.protocols}"]
        for label, value in (
            ("local", self.local_addresses),
            ("remote", self.remote_addresses),
            ("lport", self.local_ports),
            ("rport", self.remote_ports),
        ):
            if value:
                shown = value if len(value) <= 80 else f"{value[:77]}..."
                parts.append(f"{label} {shown}")
        return "  ".join(parts)


def _chunks(items: Sequence[str]) -> list[str]:
    if not items:
        return [""]
    return [",".join(items[i : i + CHUNK]) for i in range(0, len(items), CHUNK)]


def _addresses(side: Side) -> list[str]:
    if side.token is not None:
        return [side.token]
    return _chunks(side.addresses.cidrs() if side.addresses is not None else ())


def _ports(side: Side) -> list[str]:
    ports = side.ports or ()
    return _chunks([str(a) if a == b else f"{a}-{b}" for a, b in ports])


def _protocols(branch: Branch) -> list[str]:
    if branch.protocols is None:
        return [str(ANY_PROTOCOL)]
    numbers = sorted(branch.protocols)
    if len(numbers) > _SPLIT_PROTOCOLS:
        return [",".join(map(str, numbers))]
    return [str(n) for n in numbers]


def branch_acls(branch: Branch, action: str, inbound: bool, priority: int) -> Iterator[Acl]:
    """The ACLs that together match exactly ``branch``'s packets in one direction."""
    local, remote = (branch.dst, branch.src) if inbound else (branch.src, branch.dst)
    for protocols, local_addr, remote_addr, local_port, remote_port in itertools.product(
        _protocols(branch), _addresses(local), _addresses(remote), _ports(local), _ports(remote)
    ):
        yield Acl(
            priority,
            action,
            "In" if inbound else "Out",
            protocols,
            local_addr,
            remote_addr,
            local_port,
            remote_port,
        )
