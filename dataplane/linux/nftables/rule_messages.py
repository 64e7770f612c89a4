"""nf_tables rules as netlink messages, for the few ``nft`` cannot write. Pure.

nft 1.0.6 aborts (out of registers, ``netlink_linearize.c``) on a map
update whose key is over 16 bytes: ClientIP affinity's record for IPv6
(client . frontend address . protocol . port, 40 bytes) is such an update.
The kernel has sixteen 4-byte registers and takes it; here those rules
are encoded as the kernel reads them (``NFT_MSG_NEWRULE`` with a list of
expressions), registers chosen by hand, and appended to a chain ``nft -f``
made and flushed. Each rule carries its comment in its userdata as
libnftnl writes it, so a read back (and ``nft list``) sees it as any rule.

Values as ``linux/netfilter/nf_tables.h`` numbers them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dataplane.linux.nftables.nfnetlink import (
    F_ACK,
    F_CREATE,
    F_REQUEST,
    SUBSYS_NFTABLES,
    attr,
    message,
    name,
    nested,
)

__all__ = [
    "Expr",
    "bitwise",
    "cmp",
    "ct",
    "dynset",
    "lookup",
    "meta",
    "payload",
    "reg32",
    "rule_message",
]

_NEWRULE = 6
_F_APPEND = 0x800  # NLM_F_APPEND: after the chain's last rule
_RULE_TABLE, _RULE_CHAIN, _RULE_EXPRESSIONS, _RULE_USERDATA = 1, 2, 4, 7
_LIST_ELEM = 1
_EXPR_NAME, _EXPR_DATA = 1, 2
_DATA_VALUE = 1
_UDATA_RULE_COMMENT = 0  # libnftnl's type-length-value in the rule's userdata

# Keys and operations used here.
META_L4PROTO = 16
CT_STATUS, CT_PROTO_DST, CT_DST_IP, CT_DST_IP6 = 2, 12, 20, 22
CT_ORIGINAL = 0  # IP_CT_DIR_ORIGINAL
CMP_EQ, CMP_NEQ = 0, 1
NETWORK_HEADER, TRANSPORT_HEADER = 1, 2
DYNSET_UPDATE = 1
IPS_DST_NAT = 0x20  # conntrack status: the destination was rewritten


def reg32(index: int) -> int:
    """The kernel's number of 4-byte register ``index`` (0-15)."""
    if not 0 <= index < 16:
        raise ValueError(f"no register {index}")
    return 8 + index  # NFT_REG32_00


def _u32(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("!I", value))


@dataclass(frozen=True, slots=True)
class Expr:
    """One expression: its name and its attributes, encoded."""

    name: str
    data: bytes

    def encoded(self) -> bytes:
        body = attr(_EXPR_NAME, name(self.name)) + nested(_EXPR_DATA, self.data)
        return nested(_LIST_ELEM, body)


def meta(key: int, dreg: int) -> Expr:
    return Expr("meta", _u32(1, dreg) + _u32(2, key))  # DREG, KEY


def cmp(sreg: int, op: int, value: bytes) -> Expr:
    # SREG, OP, DATA
    return Expr("cmp", _u32(1, sreg) + _u32(2, op) + nested(3, attr(_DATA_VALUE, value)))


def ct(key: int, dreg: int, direction: int | None = None) -> Expr:
    data = _u32(1, dreg) + _u32(2, key)  # DREG, KEY
    if direction is not None:
        data += attr(3, struct.pack("B", direction))  # DIRECTION: one byte
    return Expr("ct", data)


def bitwise(reg: int, mask: bytes, xor: bytes) -> Expr:
    """``reg = (reg & mask) ^ xor``, over ``len(mask)`` bytes."""
    if len(mask) != len(xor):
        raise ValueError("mask and xor differ in length")
    data = _u32(1, reg) + _u32(2, reg) + _u32(3, len(mask))  # SREG, DREG, LEN
    data += nested(4, attr(_DATA_VALUE, mask)) + nested(5, attr(_DATA_VALUE, xor))  # MASK, XOR
    return Expr("bitwise", data)


def payload(base: int, offset: int, length: int, dreg: int) -> Expr:
    data = _u32(1, dreg) + _u32(2, base) + _u32(3, offset) + _u32(4, length)  # DREG BASE OFFSET LEN
    return Expr("payload", data)


def lookup(set_name: str, sreg: int) -> Expr:
    return Expr("lookup", attr(1, name(set_name)) + _u32(2, sreg))  # SET, SREG


def dynset(set_name: str, op: int, sreg_key: int, sreg_data: int, timeout_ms: int) -> Expr:
    # SET_NAME, OP, SREG_KEY, SREG_DATA
    data = attr(1, name(set_name)) + _u32(3, op) + _u32(4, sreg_key) + _u32(5, sreg_data)
    data += attr(6, struct.pack("!Q", timeout_ms))  # TIMEOUT: milliseconds
    return Expr("dynset", data)


def _userdata(comment: str) -> bytes:
    value = comment.encode() + b"\0"
    if len(value) > 128:
        raise ValueError("a comment of more than 127 bytes")
    return struct.pack("BB", _UDATA_RULE_COMMENT, len(value)) + value


def rule_message(
    family: int, table: str, chain: str, exprs: tuple[Expr, ...], comment: str
) -> bytes:
    """``NFT_MSG_NEWRULE`` appending the rule to ``chain``, acknowledged
    (sequence number 0: the writer numbers a batch's messages)."""
    body = attr(_RULE_TABLE, name(table)) + attr(_RULE_CHAIN, name(chain))
    body += nested(_RULE_EXPRESSIONS, b"".join(e.encoded() for e in exprs))
    body += attr(_RULE_USERDATA, _userdata(comment))
    flags = F_REQUEST | F_ACK | F_CREATE | _F_APPEND
    return message((SUBSYS_NFTABLES << 8) | _NEWRULE, flags, 0, family, body)
