"""nf_tables netlink framing: messages, attributes, the socket. Pure but the socket.

What the element writer (:mod:`~dataplane.linux.nftables.elements`) and the
reader (:mod:`~dataplane.linux.nftables.reader`) share: a message is a
netlink header, an ``nfgenmsg`` (family, version, resource id) and
attributes, each a length, a kind and a payload padded to four bytes
(nested ones flagged). Values as ``linux/netfilter/nf_tables.h`` numbers them.
"""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Iterator

__all__ = [
    "ATTR",
    "BATCH_BEGIN",
    "BATCH_END",
    "ERR",
    "F_ACK",
    "F_CREATE",
    "F_DUMP",
    "F_REQUEST",
    "NESTED",
    "NFGEN",
    "NFPROTO_INET",
    "NFPROTO_IPV4",
    "NFPROTO_IPV6",
    "NLMSG",
    "NLMSG_DONE",
    "NLMSG_ERROR",
    "SUBSYS_NFTABLES",
    "attr",
    "attr_list",
    "attrs",
    "message",
    "messages",
    "name",
    "nested",
    "netfilter_socket",
]

NFPROTO_INET, NFPROTO_IPV4, NFPROTO_IPV6 = 1, 2, 10

_NETLINK_NETFILTER = 12  # not in every Python build's socket module
NLMSG_ERROR, NLMSG_DONE = 2, 3
F_REQUEST, F_ACK, F_CREATE = 0x1, 0x4, 0x400
F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH
BATCH_BEGIN, BATCH_END = 0x10, 0x11
SUBSYS_NFTABLES = 10
NESTED = 0x8000
NLMSG = struct.Struct("=IHHII")
NFGEN = struct.Struct("=BBH")
ATTR = struct.Struct("=HH")
ERR = struct.Struct("=i")


def attr(kind: int, payload: bytes) -> bytes:
    size = ATTR.size + len(payload)
    return ATTR.pack(size, kind) + payload + b"\0" * (-size % 4)


def nested(kind: int, payload: bytes) -> bytes:
    return attr(kind | NESTED, payload)


def name(text: str) -> bytes:
    return text.encode() + b"\0"


def message(kind: int, flags: int, seq: int, family: int, body: bytes = b"") -> bytes:
    # The batch messages name the subsystem (res_id); the changes leave it 0.
    res_id = SUBSYS_NFTABLES if kind in (BATCH_BEGIN, BATCH_END) else 0
    payload = NFGEN.pack(family, 0, socket.htons(res_id)) + body
    return NLMSG.pack(NLMSG.size + len(payload), kind, flags, seq, 0) + payload


def messages(sock: socket.socket) -> Iterator[tuple[int, int, bytes]]:
    """Each netlink message received, as (type, sequence number, payload),
    for as long as the caller reads on."""
    while True:
        data = sock.recv(1 << 20)
        offset = 0
        while offset + NLMSG.size <= len(data):
            length, kind, _flags, seq, _pid = NLMSG.unpack_from(data, offset)
            if length < NLMSG.size:
                raise OSError(errno.EPROTO, "malformed netlink reply")
            yield kind, seq, data[offset + NLMSG.size : offset + length]
            offset += (length + 3) & ~3


def attrs(data: bytes, start: int = 0, end: int | None = None) -> dict[int, bytes]:
    """The attributes in ``data[start:end]`` by kind, nesting flag cleared
    (the last of a kind)."""
    out: dict[int, bytes] = {}
    for kind, payload in attr_list(data, start, end):
        out[kind] = payload
    return out


def attr_list(data: bytes, start: int = 0, end: int | None = None) -> list[tuple[int, bytes]]:
    """The attributes in ``data[start:end]`` in order, as (kind, payload)."""
    stop = len(data) if end is None else end
    out = []
    while start + ATTR.size <= stop:
        size, kind = ATTR.unpack_from(data, start)
        if size < ATTR.size:
            raise OSError(errno.EPROTO, "malformed netlink attribute")
        out.append((kind & ~NESTED, data[start + ATTR.size : start + size]))
        start += (size + 3) & ~3
    return out


def netfilter_socket() -> socket.socket:
    """A netlink socket to nf_tables, in the calling thread's namespace."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_NETFILTER)
    sock.bind((0, 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    return sock
