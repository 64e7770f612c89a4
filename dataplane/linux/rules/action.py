"""What a rule does when it matches: a verdict, a jump, a mark or a log."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Accept", "Action", "Drop", "Goto", "Jump", "Log", "Return", "SetMark"]


@dataclass(frozen=True, slots=True)
class Accept:
    pass


@dataclass(frozen=True, slots=True)
class Drop:
    pass


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
class Log:
    """Log the packet with ``prefix`` at syslog ``level``; go on with the next rule."""

    prefix: str
    level: int = 5


Action = Accept | Drop | Return | Jump | Goto | SetMark | Log
