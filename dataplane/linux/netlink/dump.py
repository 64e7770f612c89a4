"""Whole-table reads of links and routes over a raw netlink socket.

pyroute2 decodes every attribute of every message into Python objects:
on a node with 1,000 pods (1,000 veths, thousands of routes counting the
kernel's own) one read of the links and the routes took most of a second,
more than writing every route. The programmers need a handful of fields,
so these dumps unpack just those with :mod:`struct` and step over the
rest.

What comes back has the keys pyroute2's messages answer to (``ifname``,
``index``, ``flags``, ``operstate``, ``mtu``; ``proto``, ``dst``, ``dst_len``,
``oif``, ``gateway``, ``type``, ``flags``, ``table``), as plain dicts, so
the programmers and their fakes read one shape. :class:`FastReads` is the
platform's handle: whole-table reads and link notifications come from
here, everything else (single links, addresses, the VXLAN device) goes to
pyroute2, imported and opened on first use.
"""

from __future__ import annotations

import errno
import functools
import os
import socket
import struct
from collections.abc import Callable, Iterator
from types import GeneratorType
from typing import Any

from dataplane.linux.kernel.errors import pyroute2_errors
from dataplane.linux.netlink.batch import replies

__all__ = ["FastReads", "dump_links", "dump_routes", "platform_handle"]

_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_RTM_GETLINK, _RTM_GETROUTE = 18, 26
_F_REQUEST, _F_DUMP = 0x1, 0x300
_F_DUMP_INTR = 0x10  # the table changed during the dump: read it again
_NLMSG = struct.Struct("=IHHII")
_IFINFO = struct.Struct("=BxHiII")
_RTMSG = struct.Struct("=BBBBBBBBI")
_ATTR = struct.Struct("=HH")
_ERR = struct.Struct("=i")
_U32 = struct.Struct("=I")
_IFLA_MTU, _IFLA_IFNAME, _IFLA_OPERSTATE = 4, 3, 16
_RTA_DST, _RTA_OIF, _RTA_GATEWAY, _RTA_TABLE = 1, 4, 5, 15
_OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")
_ATTEMPTS = 3
_LINKS = _IFINFO.pack(0, 0, 0, 0, 0)
_LINK_EVENTS = {16: "RTM_NEWLINK", 17: "RTM_DELLINK"}
# Room asked for a burst of notifications while the listener thread waits
# for the GIL (the kernel grants up to net.core.rmem_max); beyond it the
# kernel drops them and says ENOBUFS, and the monitor reads every link again.
_EVENTS_BUFFER = 4 << 20


def _messages(kind: int, body: bytes) -> Iterator[tuple[bytes, int, int]]:
    """(data, offset of the payload, end) of each answer to one dump request."""
    for _ in range(_ATTEMPTS):
        answers, interrupted = _dump_once(kind, body)
        if not interrupted:
            yield from answers
            return
    raise OSError(errno.EAGAIN, "netlink dump kept being interrupted by changes")


def _dump_once(kind: int, body: bytes) -> tuple[list[tuple[bytes, int, int]], bool]:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    try:
        sock.bind((0, 0))
        sock.send(_NLMSG.pack(_NLMSG.size + len(body), kind, _F_REQUEST | _F_DUMP, 1, 0) + body)
        answers: list[tuple[bytes, int, int]] = []
        interrupted = False
        while True:
            data = sock.recv(1 << 20)
            for mtype, flags, _seq, start, end in replies(data):
                interrupted |= bool(flags & _F_DUMP_INTR)
                if mtype == _NLMSG_DONE:
                    return answers, interrupted
                if mtype == _NLMSG_ERROR:
                    (code,) = _ERR.unpack_from(data, start)
                    if code:
                        raise OSError(-code, os.strerror(-code))
                else:
                    answers.append((data, start, end))
    finally:
        sock.close()


def _attrs(data: bytes, offset: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(type, payload offset, payload end) of each attribute."""
    while offset + _ATTR.size <= end:
        length, kind = _ATTR.unpack_from(data, offset)
        if length < _ATTR.size:
            return
        yield kind & 0x3FFF, offset + _ATTR.size, offset + length  # without the NLA_F_ flags
        offset += (length + 3) & ~3


def dump_links() -> list[dict[str, Any]]:
    return [_link(data, start, end) for data, start, end in _messages(_RTM_GETLINK, _LINKS)]


def _link(data: bytes, start: int, end: int) -> dict[str, Any]:
    """One RTM_NEWLINK / RTM_DELLINK message's index, flags, name, MTU and state."""
    _family, _type, index, flags, _change = _IFINFO.unpack_from(data, start)
    link: dict[str, Any] = {"index": index, "flags": flags}
    for kind, a, b in _attrs(data, start + _IFINFO.size, end):
        if kind == _IFLA_IFNAME:
            link["ifname"] = data[a:b].split(b"\0", 1)[0].decode(errors="replace")
        elif kind == _IFLA_MTU:
            link["mtu"] = _U32.unpack_from(data, a)[0]
        elif kind == _IFLA_OPERSTATE:
            state = data[a]
            link["operstate"] = _OPERSTATES[state] if state < len(_OPERSTATES) else "UNKNOWN"
    return link


def dump_routes(family: int, table: int, protocol: int | None = None) -> list[dict[str, Any]]:
    """Routes of ``family`` in ``table`` (of ``protocol`` only, if given)."""
    out = []
    request = _RTMSG.pack(family, 0, 0, 0, 0, 0, 0, 0, 0)
    for data, start, end in _messages(_RTM_GETROUTE, request):
        fam, dst_len, _src, _tos, rtm_table, proto, scope, rtype, flags = _RTMSG.unpack_from(
            data, start
        )
        if fam != family or (protocol is not None and proto != protocol):
            continue
        route: dict[str, Any] = {
            "family": fam,
            "dst_len": dst_len,
            "proto": proto,
            "scope": scope,
            "type": rtype,
            "flags": flags,
            "table": rtm_table,
        }
        for kind, a, b in _attrs(data, start + _RTMSG.size, end):
            if kind == _RTA_DST:
                route["dst"] = socket.inet_ntop(fam, data[a:b])
            elif kind == _RTA_GATEWAY:
                route["gateway"] = socket.inet_ntop(fam, data[a:b])
            elif kind == _RTA_OIF:
                route["oif"] = _U32.unpack_from(data, a)[0]
            elif kind == _RTA_TABLE:
                route["table"] = _U32.unpack_from(data, a)[0]  # the whole number past 255
        if route["table"] == table:
            out.append(route)
    return out


class FastReads:
    """The platform's netlink handle: whole-table link and route reads use the
    dumps above and link notifications a socket of its own; anything else
    (one link, addresses, the VXLAN device) goes to a pyroute2 handle,
    imported and opened on first use, so a node without VXLAN never loads
    pyroute2. Its errors come out as
    :class:`~dataplane.linux.kernel.errors.NetlinkError`."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._handle: Any = None
        self._events: socket.socket | None = None

    def get_links(self, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:  # one link by index or name: pyroute2's answer
            return self._call("get_links", *args, **kwargs)
        return dump_links()

    def get_routes(self, **kwargs: Any) -> Any:
        if set(kwargs) != {"family", "table"}:
            return self._call("get_routes", **kwargs)
        return dump_routes(kwargs["family"], kwargs["table"])

    def bind(self, groups: int) -> None:
        """Listen to the notifications of ``groups`` (an RTMGRP_ mask)."""
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _EVENTS_BUFFER)
        sock.bind((0, groups))
        self._events = sock

    def get(self) -> list[dict[str, Any]]:
        """Blocking: the link notifications of one read, each with its ``event``.

        Raises:
            OSError: ``ENOBUFS`` when the kernel dropped some.
        """
        assert self._events is not None, "bind first"
        data = self._events.recv(1 << 20)
        out = []
        for kind, _flags, _seq, start, end in replies(data):
            if kind in _LINK_EVENTS:
                out.append(_link(data, start, end) | {"event": _LINK_EVENTS[kind]})
        return out

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        with pyroute2_errors():
            if self._handle is None:
                self._handle = self._make()
            result = getattr(self._handle, name)(*args, **kwargs)
            # pyroute2 answers some calls lazily: its errors come on iteration.
            return list(result) if isinstance(result, GeneratorType) else result

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return functools.partial(self._call, name)

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def platform_handle() -> FastReads:
    """The Linux platform's handle, of the namespace the driver runs in."""
    return FastReads(_pyroute2)


def _pyroute2() -> Any:
    """A pyroute2 handle: its package imported here, when a call first needs one."""
    from pyroute2 import IPRoute  # type: ignore[import-untyped]  # noqa: PLC0415

    return IPRoute()
