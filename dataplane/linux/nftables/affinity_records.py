"""ClientIP affinity's record rules for IPv6, as netlink expressions. Pure.

The IPv4 services table records a client's backend with rules ``nft``
writes (``service_rules``). For IPv6 the same rules have keys of 24 and
40 bytes, and nft 1.0.6 aborts on such a map update; the kernel takes
them, so they are encoded here (:mod:`~dataplane.linux.nftables.rule_messages`)
with registers laid out by hand, each field of a concatenation in
registers of its own as the kernel compares keys:

* the live-set key, (original destination . protocol . original port .)
  backend address . backend port, from register 0;
* the map key, client . (original destination .) protocol . original
  port, from register 0, and the value after it.

They go in the chain ``aff-record`` (:data:`RECORD_CHAIN`), which the
script makes, flushes and jumps to from srcnat where the IPv4 table has
its record rules. Each carries the comment of what it says in nft syntax
(:attr:`RecordRule.text`), so the table's read back compares them as
every other rule.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from dataplane.linux.nftables.rule_messages import (
    CMP_EQ,
    CMP_NEQ,
    CT_DST_IP6,
    CT_ORIGINAL,
    CT_PROTO_DST,
    CT_STATUS,
    DYNSET_UPDATE,
    IPS_DST_NAT,
    META_L4PROTO,
    NETWORK_HEADER,
    TRANSPORT_HEADER,
    Expr,
    bitwise,
    cmp,
    ct,
    dynset,
    lookup,
    meta,
    payload,
    reg32,
)
from dataplane.linux.nftables.service_rules import (
    AFFINITY_PROTOCOLS,
    RECORD_CHAIN,
    live_set,
    rule_id,
)

__all__ = ["RECORD_CHAIN", "RecordRule", "records"]

_PROTOCOL_NUMBERS = {"tcp": 6, "udp": 17, "sctp": 132}
_SADDR, _DADDR = 8, 24  # offsets in the IPv6 header
_DPORT = 2  # in the transport header


def _daddr(reg: int) -> Expr:
    return payload(NETWORK_HEADER, _DADDR, 16, reg32(reg))


def _dport(reg: int) -> Expr:
    return payload(TRANSPORT_HEADER, _DPORT, 2, reg32(reg))


def _original(reg: int, *, routed: bool) -> tuple[list[Expr], int]:
    """The frontend as the client addressed it, from register ``reg``:
    expressions and the next free register."""
    out: list[Expr] = []
    if routed:
        out.append(ct(CT_DST_IP6, reg32(reg), CT_ORIGINAL))
        reg += 4
    out.append(meta(META_L4PROTO, reg32(reg)))
    out.append(ct(CT_PROTO_DST, reg32(reg + 1), CT_ORIGINAL))
    return out, reg + 2


@dataclass(frozen=True, slots=True)
class RecordRule:
    """One record rule: for frontends of kind ``prefix`` ("" routed, "np_"
    node ports) with affinity ``timeout``, packets of ``protocol``."""

    prefix: str
    timeout: int
    protocol: str

    @property
    def text(self) -> str:
        """What the rule says, in nft syntax (as the IPv4 table writes it)."""
        original = (
            "ct original ip6 daddr . meta l4proto . ct original proto-dst"
            if not self.prefix
            else "meta l4proto . ct original proto-dst"
        )
        live = live_set(self.timeout, node_port=bool(self.prefix))
        seen = f"ip6 saddr . {original} timeout {self.timeout}s"
        return (
            f"meta l4proto {self.protocol} ct status dnat"
            f" {original} . ip6 daddr . th dport @{live}"
            f" update @{self.prefix}aff_addr {{ {seen} : ip6 daddr }}"
            f" update @{self.prefix}aff_port {{ {seen} : th dport }}"
        )

    @property
    def comment(self) -> str:
        return rule_id(self.text)

    def exprs(self) -> tuple[Expr, ...]:
        routed = not self.prefix
        number = struct.pack("B", _PROTOCOL_NUMBERS[self.protocol])
        zero = struct.pack("=I", 0)
        out = [
            meta(META_L4PROTO, reg32(0)),
            cmp(reg32(0), CMP_EQ, number),
            ct(CT_STATUS, reg32(0)),
            bitwise(reg32(0), struct.pack("=I", IPS_DST_NAT), zero),
            cmp(reg32(0), CMP_NEQ, zero),
        ]
        # Only a pair the frontend still has is recorded.
        original, free = _original(0, routed=routed)
        out += [*original, _daddr(free), _dport(free + 4)]
        out.append(lookup(live_set(self.timeout, node_port=not routed), reg32(0)))
        # client . frontend -> backend address, then backend port.
        key = [payload(NETWORK_HEADER, _SADDR, 16, reg32(0))]
        original, value = _original(4, routed=routed)
        ms = self.timeout * 1000
        out += [*key, *original, _daddr(value)]
        out.append(dynset(f"{self.prefix}aff_addr", DYNSET_UPDATE, reg32(0), reg32(value), ms))
        out.append(_dport(value))
        out.append(dynset(f"{self.prefix}aff_port", DYNSET_UPDATE, reg32(0), reg32(value), ms))
        return tuple(out)


def records(timeouts: Sequence[int]) -> list[RecordRule]:
    """The record rules for the affinity timeouts in use, in chain order."""
    return [
        RecordRule(prefix, timeout, protocol)
        for timeout in sorted(set(timeouts))
        for prefix in ("", "np_")
        for protocol in AFFINITY_PROTOCOLS
    ]
