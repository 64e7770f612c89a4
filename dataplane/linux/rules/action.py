"""What a rule does when it matches: a verdict, a jump, a mark or a log."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Accept",
    "Action",
    "Dispatch",
    "Dnat",
    "Drop",
    "Goto",
    "Jump",
    "Log",
    "Masquerade",
    "Notrack",
    "Reject",
    "Return",
    "SetDscp",
    "SetMark",
    "Snat",
    "named_verdict",
]


@dataclass(frozen=True, slots=True)
class Accept:
    pass


@dataclass(frozen=True, slots=True)
class Drop:
    pass


@dataclass(frozen=True, slots=True)
class Reject:
    """Drop, and tell the sender: ICMP unreachable, or with ``tcp_reset`` a
    TCP reset (the rule must match TCP only)."""

    tcp_reset: bool = False


@dataclass(frozen=True, slots=True)
class Notrack:
    """Leave the packet's connection untracked (raw table only); go on."""


@dataclass(frozen=True, slots=True)
class Return:
    """Back to the chain that jumped here."""


@dataclass(frozen=True, slots=True)
class Jump:
    """Run ``chain``, then go on here unless it gave a verdict."""

    chain: str


@dataclass(frozen=True, slots=True)
class Goto:
    """Run ``chain`` instead of the rest of this one."""

    chain: str


@dataclass(frozen=True, slots=True)
class SetMark:
    """Set the packet mark's ``mask`` bits to ``value``; go on with the next rule."""

    mask: int
    value: int

    @classmethod
    def on(cls, bits: int) -> SetMark:
        return cls(bits, bits)

    @classmethod
    def off(cls, bits: int) -> SetMark:
        return cls(bits, 0)


@dataclass(frozen=True, slots=True)
class SetDscp:
    """Set the IPv``version`` header's DSCP to ``value`` (0-63); go on with the next rule."""

    value: int
    version: int = 4


@dataclass(frozen=True, slots=True)
class Log:
    """Log the packet with ``prefix`` at syslog ``level``; go on with the next rule."""

    prefix: str
    level: int = 5


@dataclass(frozen=True, slots=True)
class Dnat:
    """Rewrite the destination address to ``to`` (nat table)."""

    to: str


@dataclass(frozen=True, slots=True)
class Snat:
    """Rewrite the source address to ``to``, the source port within ``ports``
    (first, last) if given (nat table)."""

    to: str
    ports: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class Masquerade:
    """Rewrite the source to the outgoing interface's address, the source
    port within ``ports`` (first, last) if given (nat table)."""

    ports: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Go to the chain verdict map ``map`` holds for the packet's incoming
    (``inbound``) or outgoing interface; go on here if it holds none.

    nftables only: one element per interface replaces a tree of rules, so
    an endpoint added is data, not a rule (``docs/nftables.md``).
    """

    map: str
    inbound: bool


Action = (
    Accept
    | Drop
    | Reject
    | Return
    | Jump
    | Goto
    | SetMark
    | SetDscp
    | Log
    | Notrack
    | Dnat
    | Snat
    | Masquerade
    | Dispatch
)

_NAMED: dict[str, Action] = {
    "ACCEPT": Accept(),
    "DROP": Drop(),
    "REJECT": Reject(),
    "RETURN": Return(),
}


def named_verdict(name: str) -> Action:
    """A verdict as Felix's configuration names it (``IptablesFilterDenyAction=REJECT``)."""
    return _NAMED[name]
