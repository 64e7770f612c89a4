"""Reading our nf_tables objects back: a set's elements, a table's rules. No ``nft``.

``nft list`` fetches the whole ruleset first, every element of every
interval set in the namespace with it, and prints text to be parsed again;
a netlink dump of one set (``NFT_MSG_GETSETELEM``), of one table's set
names (``NFT_MSG_GETSET``) or of its rules (``NFT_MSG_GETRULE``) answers
only what was asked, as the kernel holds it.
Elements come back in the encoding the writer uses
(:meth:`ReadElement.encoded`), so what was read compares with what was
written byte for byte. Blocking: call it from a worker thread, and read each answer to its end
(the socket closes when it is).
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from dataplane.linux.nftables.elements import (
    Verdict,
    encoded,
    interval_end,
    ranged,
    verdict_element,
)
from dataplane.linux.nftables.nfnetlink import (
    ERR,
    F_DUMP,
    F_REQUEST,
    NFGEN,
    NLMSG_DONE,
    NLMSG_ERROR,
    SUBSYS_NFTABLES,
    attr,
    attr_list,
    attrs,
    message,
    messages,
    name,
    netfilter_socket,
)

__all__ = ["ReadElement", "ReadRule", "TableReader", "TableSource"]

_NEWRULE, _GETRULE, _NEWSET, _GETSET, _NEWSETELEM, _GETSETELEM = 6, 7, 9, 10, 12, 13
_SET_TABLE, _SET_NAME = 1, 2
_RULE_TABLE, _RULE_CHAIN, _RULE_USERDATA = 1, 2, 7
_UDATA_RULE_COMMENT = 0  # libnftnl's type-length-value, in the rule's userdata
_LIST_TABLE, _LIST_SET, _LIST_ELEMENTS = 1, 2, 3
_ELEM_KEY, _ELEM_DATA, _ELEM_FLAGS, _ELEM_KEY_END = 1, 2, 3, 10
_DATA_VALUE, _DATA_VERDICT = 1, 2
_VERDICT_CODE, _VERDICT_CHAIN = 1, 2
_VERDICT_KINDS = {-3: "jump", -4: "goto"}  # NFT_JUMP, NFT_GOTO
_INTERVAL_END = 1  # NFT_SET_ELEM_INTERVAL_END


@dataclass(frozen=True, slots=True)
class ReadElement:
    """One element as the kernel holds it."""

    key: bytes
    data: bytes = b""  # a data map's value
    key_end: bytes = b""  # a concatenated range's last key
    interval_end: bool = False  # a single-field interval set's end element
    verdict: Verdict | None = None  # a verdict map's value (jumps and gotos only)

    def encoded(self) -> bytes:
        """As :mod:`~dataplane.linux.nftables.elements` encodes it for writing."""
        if self.verdict is not None:
            return verdict_element(self.key, self.verdict)
        if self.key_end:
            return ranged(self.key, self.key_end)
        if self.interval_end:
            return interval_end(self.key)
        return encoded(self.key, self.data)


@dataclass(frozen=True, slots=True)
class ReadRule:
    """One rule as the kernel holds it: its chain and the comment it carries."""

    chain: str
    comment: str  # "" without one


def _comment(userdata: bytes) -> str:
    """The comment in a rule's userdata (libnftnl: type, length, value)."""
    at = 0
    while at + 2 <= len(userdata):
        kind, size = userdata[at], userdata[at + 1]
        if kind == _UDATA_RULE_COMMENT:
            return userdata[at + 2 : at + 2 + size].rstrip(b"\0").decode(errors="replace")
        at += 2 + size
    return ""


class TableSource(Protocol):
    """Who reads our tables back: a :class:`TableReader`, or a fake in tests."""

    def elements(self, family: int, table: str, set_name: str) -> Iterable[ReadElement]: ...

    def rules(self, family: int, table: str) -> list[ReadRule]: ...

    def set_names(self, family: int, table: str) -> list[str]: ...


def _value(payload: bytes) -> bytes:
    return attrs(payload).get(_DATA_VALUE, b"")


def _verdict(data: bytes) -> Verdict | None:
    """A verdict map element's jump or goto (None: not a verdict, or
    another verdict, which our maps never hold)."""
    verdict = attrs(data).get(_DATA_VERDICT)
    if verdict is None:
        return None
    found = attrs(verdict)
    (code,) = struct.unpack("!i", found.get(_VERDICT_CODE, b"\0\0\0\0"))
    kind = _VERDICT_KINDS.get(code)
    chain = found.get(_VERDICT_CHAIN, b"").rstrip(b"\0").decode(errors="replace")
    return Verdict(kind, chain) if kind else None


def _element(payload: bytes) -> ReadElement:
    found = attrs(payload)
    flags = found.get(_ELEM_FLAGS)
    data = found.get(_ELEM_DATA, b"")
    return ReadElement(
        _value(found.get(_ELEM_KEY, b"")),
        _value(data),
        _value(found.get(_ELEM_KEY_END, b"")),
        bool(flags and struct.unpack("!I", flags)[0] & _INTERVAL_END),
        _verdict(data),
    )


class TableReader:
    """Netlink dumps of one set's elements or one table's rules.

    Raises:
        OSError: the kernel refused the dump (ENOENT: no such table or
            set), or the socket failed.
    """

    def __init__(self, sock: Callable[[], socket.socket] = netfilter_socket) -> None:
        self._socket = sock

    def elements(self, family: int, table: str, set_name: str) -> Iterator[ReadElement]:
        """Every element of the set, as the answers arrive (a caller that
        keeps only an encoding never holds them all as objects)."""
        body = attr(_LIST_TABLE, name(table)) + attr(_LIST_SET, name(set_name))
        for payload in self._dump(_GETSETELEM, _NEWSETELEM, family, body):
            listed = attrs(payload, NFGEN.size).get(_LIST_ELEMENTS, b"")
            for _, element in attr_list(listed):
                yield _element(element)

    def set_names(self, family: int, table: str) -> list[str]:
        """The names of ``table``'s sets and maps."""
        out = []
        for payload in self._dump(_GETSET, _NEWSET, family, attr(_SET_TABLE, name(table))):
            found = attrs(payload, NFGEN.size)
            out.append(found.get(_SET_NAME, b"").rstrip(b"\0").decode(errors="replace"))
        return out

    def rules(self, family: int, table: str) -> list[ReadRule]:
        """Every rule of ``table``, in order."""
        out = []
        for payload in self._dump(_GETRULE, _NEWRULE, family, attr(_RULE_TABLE, name(table))):
            found = attrs(payload, NFGEN.size)
            chain = found.get(_RULE_CHAIN, b"").rstrip(b"\0").decode(errors="replace")
            out.append(ReadRule(chain, _comment(found.get(_RULE_USERDATA, b""))))
        return out

    def _dump(self, ask: int, answer: int, family: int, body: bytes) -> Iterator[bytes]:
        """The payloads of a dump's answers (of type ``answer``), as they arrive."""
        sock = self._socket()
        try:
            sock.send(message((SUBSYS_NFTABLES << 8) | ask, F_REQUEST | F_DUMP, 1, family, body))
            for kind, _seq, payload in messages(sock):
                if kind == NLMSG_DONE:
                    return
                if kind == NLMSG_ERROR:
                    (code,) = ERR.unpack_from(payload)
                    if code:
                        raise OSError(-code, os.strerror(-code))
                    return
                if kind == (SUBSYS_NFTABLES << 8) | answer:
                    yield payload
        finally:
            sock.close()
