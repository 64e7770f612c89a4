"""A chain of rules, in the model or in one backend's syntax, and what makes one from the other."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from dataplane.linux.rules.rule import TableRule

__all__ = ["Chain", "Serialiser"]

R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True, slots=True)
class Chain(Generic[R_co]):
    """A named chain; ``R_co`` is the rule type (a backend's rule, or the model's)."""

    name: str
    rules: tuple[R_co, ...] = ()


class Serialiser(Protocol[R_co]):
    """Model rules in one backend's syntax (``iptables/serialise``, ``nftables/serialise``)."""

    def rules(self, rules: Iterable[TableRule]) -> tuple[R_co, ...]: ...
