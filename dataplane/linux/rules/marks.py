"""Packet mark bits, carved out of the configured ``IptablesMarkMask``.

Policy evaluation communicates through mark bits, as in Felix: *accept*
("a policy allowed it"), *pass* ("skip to the next tier"), and scratch bits
used to OR several matches together where one iptables rule cannot (several
CIDRs, ports OR named ports). Bits are taken from the mask's lowest set bit
upwards, so an operator who reserves the top of the mark for something else
only has to narrow the mask.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataplane.config_values import MIN_MARK_BITS
from dataplane.errors import ConfigError

__all__ = ["Marks", "ScratchBits"]

_NAMES = (
    "accept",
    "pass_",
    "src_net",
    "dst_net",
    "not_src_net",
    "not_dst_net",
    "src_port",
    "dst_port",
    "masq",
    "drop",
)
assert len(_NAMES) == MIN_MARK_BITS  # the config edge refuses narrower masks


@dataclass(frozen=True, slots=True)
class Marks:
    accept: int
    pass_: int
    src_net: int
    dst_net: int
    not_src_net: int
    not_dst_net: int
    src_port: int
    dst_port: int
    masq: int  # service traffic to masquerade on the way out (kube-proxy's 0x4000)
    drop: int  # service traffic to drop in the filter table (kube-proxy's 0x8000)

    @classmethod
    def from_mask(cls, mask: int) -> Marks:
        bits = [1 << i for i in range(32) if mask & (1 << i)]
        if len(bits) < len(_NAMES):
            raise ConfigError(
                "config[IptablesMarkMask]",
                hex(mask),
                f"needs at least {len(_NAMES)} bits for policy and service marks",
            )
        return cls(*bits[: len(_NAMES)])

    @property
    def all(self) -> int:
        """The policy bits, cleared as policy evaluation starts.

        Not the service bits: those are set in the nat table before the
        filter table runs and must survive to POSTROUTING.
        """
        return (
            self.accept
            | self.pass_
            | self.src_net
            | self.dst_net
            | self.not_src_net
            | self.not_dst_net
            | self.src_port
            | self.dst_port
        )


class ScratchBits:
    """The scratch bits one rule's ORs take, each at most once.

    Two ORs on one bit would mix their alternatives, so a second claim of a
    bit is a renderer's bug; so is an OR in a table given no marks (nat).
    """

    def __init__(self, marks: Marks | None) -> None:
        self._marks = marks
        self._taken: set[int] = set()

    def take(self, name: str) -> int:
        """The bit called ``name`` (``src_net``, ``not_dst_net``, ``dst_port``...)."""
        if self._marks is None:
            raise ValueError("an OR needs scratch mark bits, and this table has none")
        bit: int = getattr(self._marks, name)
        if bit in self._taken:
            raise ValueError(f"two terms of one rule need scratch mark {bit:#x}")
        self._taken.add(bit)
        return bit
