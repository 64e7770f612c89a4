"""Route, neighbour and FDB writes, many per system call, over a raw netlink socket.

pyroute2 costs about a millisecond per request (encoding in Python, one
send and one wait for the acknowledgement each), which made routes the
largest share of a big load. The kernel takes any number of requests in
one ``send``, works through them in order, goes on past a refused one,
and answers a refused request with an error naming its sequence number
whether or not it asked for an acknowledgement. So here the requests are
encoded with :mod:`struct` (three fixed layouts) and sent in chunks; only
the last request of a chunk asks for an acknowledgement, and once that
has come every earlier error has come too: one receive per chunk instead
of one per request, and one refused request never hides or blocks another.

Only writes go this way; reading the kernel's tables stays with pyroute2.
The socket belongs to the network namespace of the calling process.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

__all__ = [
    "NeighRequest",
    "NetlinkBatch",
    "NetlinkWriter",
    "Request",
    "RouteRequest",
    "encode",
    "replies",
]

_NLMSG_ERROR = 2
_RTM_NEWROUTE, _RTM_DELROUTE = 24, 25
_RTM_NEWNEIGH, _RTM_DELNEIGH = 28, 29
_F_REQUEST, _F_ACK, _F_REPLACE, _F_CREATE = 0x1, 0x4, 0x100, 0x400
_RTA_DST, _RTA_OIF, _RTA_GATEWAY, _RTA_TABLE = 1, 4, 5, 15
_NDA_DST, _NDA_LLADDR = 1, 2
_SCOPE_NOWHERE = 255  # in a delete: any scope
_NLMSG = struct.Struct("=IHHII")
_RTMSG = struct.Struct("=BBBBBBBBI")
_NDMSG = struct.Struct("=BxxxiHBB")
_ATTR = struct.Struct("=HH")
_ERR = struct.Struct("=i")
_CHUNK = 256  # requests per send: their acknowledgements fit the receive buffer


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """Replace or delete one route of the main table carrying our protocol."""

    command: str  # "replace" or "del"
    dst: str  # CIDR
    protocol: int
    rtype: int = 1  # RTN_UNICAST; 6 is RTN_BLACKHOLE
    oif: int = 0
    gateway: str = ""
    onlink: bool = False
    scope: int = 0
    table: int = 254


@dataclass(frozen=True, slots=True)
class NeighRequest:
    """Replace or delete one permanent neighbour (AF_INET/6) or FDB (AF_BRIDGE) entry."""

    command: str
    family: int
    ifindex: int
    mac: str
    address: str  # the neighbour's IP, or the FDB entry's remote
    state: int = 0x80  # NUD_PERMANENT
    flags: int = 0  # NTF_SELF (0x02) for a VXLAN device's FDB


Request = RouteRequest | NeighRequest
# What writes requests (NetlinkBatch, a meter around it, a fake): one result
# per request, in order, an OSError for each the kernel refused.
NetlinkWriter = Callable[[Sequence[Request]], list[OSError | None]]


def _attr(kind: int, payload: bytes) -> bytes:
    size = _ATTR.size + len(payload)
    return _ATTR.pack(size, kind) + payload + b"\0" * (-size % 4)


def _packed(address: str) -> bytes:
    # inet_pton, not ipaddress: a tenth of the cost, and it refuses the same text.
    return socket.inet_pton(socket.AF_INET6 if ":" in address else socket.AF_INET, address)


def _route(r: RouteRequest) -> tuple[int, int, bytes]:
    address, _, length = r.dst.partition("/")
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    delete = r.command == "del"
    body = _RTMSG.pack(
        family,
        int(length),
        0,
        0,
        r.table if r.table < 256 else 252,
        r.protocol,
        _SCOPE_NOWHERE if delete else r.scope,
        0 if delete else r.rtype,
        0x4 if r.onlink else 0,  # RTNH_F_ONLINK
    )
    body += _attr(_RTA_DST, _packed(address))
    body += _attr(_RTA_TABLE, struct.pack("=I", r.table))
    if not delete:
        if r.oif:
            body += _attr(_RTA_OIF, struct.pack("=i", r.oif))
        if r.gateway:
            body += _attr(_RTA_GATEWAY, _packed(r.gateway))
    kind = _RTM_DELROUTE if delete else _RTM_NEWROUTE
    return kind, 0 if delete else _F_CREATE | _F_REPLACE, body


def _neigh(n: NeighRequest) -> tuple[int, int, bytes]:
    delete = n.command == "del"
    body = _NDMSG.pack(n.family, n.ifindex, n.state, n.flags, 0)
    body += _attr(_NDA_DST, _packed(n.address))
    body += _attr(_NDA_LLADDR, bytes.fromhex(n.mac.replace(":", "")))
    kind = _RTM_DELNEIGH if delete else _RTM_NEWNEIGH
    return kind, 0 if delete else _F_CREATE | _F_REPLACE, body


def encode(request: Request, seq: int, *, ack: bool = True) -> bytes:
    """One netlink message; the kernel answers it only if refused, unless ``ack``."""
    kind, flags, body = _route(request) if isinstance(request, RouteRequest) else _neigh(request)
    flags |= _F_REQUEST | (_F_ACK if ack else 0)
    return _NLMSG.pack(_NLMSG.size + len(body), kind, flags, seq, 0) + body


def _raw_socket() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    sock.bind((0, 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    return sock


class NetlinkBatch:
    """Sends requests in chunks; returns, per request, None or the error the kernel gave."""

    def __init__(self, sock: Callable[[], socket.socket] = _raw_socket) -> None:
        self._socket = sock

    def __call__(self, requests: Sequence[Request]) -> list[OSError | None]:
        results: list[OSError | None] = [None] * len(requests)
        if not requests:
            return results
        sock = self._socket()
        try:
            for start in range(0, len(requests), _CHUNK):
                chunk = requests[start : start + _CHUNK]
                # Sequence numbers are 1-based positions in the chunk.
                last = len(chunk)
                sock.send(
                    b"".join(encode(r, i, ack=i == last) for i, r in enumerate(chunk, start=1))
                )
                for seq, error in self._answers(sock, last):
                    if error:
                        results[start + seq - 1] = OSError(error, os.strerror(error))
        finally:
            sock.close()
        return results

    @staticmethod
    def _answers(sock: socket.socket, last: int) -> list[tuple[int, int]]:
        """(seq, errno) of each answer, up to and including the one to ``last``."""
        out: list[tuple[int, int]] = []
        while not out or out[-1][0] != last:
            data = sock.recv(1 << 20)
            for kind, _flags, seq, start, _end in replies(data):
                if kind == _NLMSG_ERROR:
                    (code,) = _ERR.unpack_from(data, start)
                    out.append((seq, -code))
        return out


def replies(data: bytes) -> Iterator[tuple[int, int, int, int, int]]:
    """(type, flags, seq, payload start, end) of each message one ``recv`` returned."""
    offset = 0
    while offset + _NLMSG.size <= len(data):
        length, kind, flags, seq, _pid = _NLMSG.unpack_from(data, offset)
        if length < _NLMSG.size:
            raise OSError(errno.EPROTO, "malformed netlink reply")
        yield kind, flags, seq, offset + _NLMSG.size, offset + length
        offset += (length + 3) & ~3
