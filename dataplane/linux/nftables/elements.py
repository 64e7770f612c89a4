"""Set and map element changes for nf_tables: one transaction, one ``send``, no ``nft``.

The ``nft`` tool drops its cache after every commit and fetches the ruleset
again before the next, so one element changed through ``nft -f`` costs what
the fetch costs (10-20 ms at 5,000 services, ``docs/nftables.md``) however
small the change. The kernel needs none of that: an element change is a
``NFT_MSG_NEWSETELEM`` or ``NFT_MSG_DELSETELEM`` message naming the table,
the set and the elements. Here those messages are encoded with
:mod:`struct` and sent between a batch begin and a batch end, which makes
them one transaction: the kernel applies all of them or, if it refuses
any, none.

Values are encoded as nf_tables stores them: addresses and ports in
network byte order, protocol numbers as one byte, integers (``numgen``
slots, marks) in host byte order; in a concatenation every field is padded
to four bytes, as ``nft`` lays out a concatenated key.

Reading back is :mod:`~dataplane.linux.nftables.reader`; the framing
both share is :mod:`~dataplane.linux.nftables.nfnetlink`.

Only element writes go this way (structure — tables, chains, rules, sets —
stays with ``nft -f``). The socket belongs to the network namespace of the
calling process.
"""

from __future__ import annotations

import functools
import os
import socket
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from dataplane.linux.nftables.nfnetlink import (
    ATTR,
    BATCH_BEGIN,
    BATCH_END,
    ERR,
    F_ACK,
    F_CREATE,
    F_REQUEST,
    NESTED,
    NFPROTO_INET,
    NFPROTO_IPV4,
    NFPROTO_IPV6,
    NLMSG_ERROR,
    SUBSYS_NFTABLES,
    attr,
    message,
    messages,
    name,
    nested,
    netfilter_socket,
)

__all__ = [
    "NFPROTO_INET",
    "NFPROTO_IPV4",
    "NFPROTO_IPV6",
    "Element",
    "ElementChange",
    "ElementSink",
    "ElementWriter",
    "Field",
    "Verdict",
    "addr",
    "concat",
    "data_of",
    "encode_batch",
    "encoded",
    "encoder",
    "ifname",
    "integer",
    "interval",
    "interval_end",
    "key_of",
    "netfilter_socket",
    "port",
    "proto",
    "ranged",
    "verdict_element",
    "with_key",
]

_SO_SNDBUFFORCE = 32  # needs CAP_NET_ADMIN, which writing nf_tables needs anyway
_NEWSETELEM, _DELSETELEM = 12, 14
_LIST_TABLE, _LIST_SET, _LIST_ELEMENTS = 1, 2, 3
_LIST_ELEM = 1
_ELEM_KEY, _ELEM_DATA, _ELEM_FLAGS, _ELEM_KEY_END = 1, 2, 3, 10  # 9 is padding
_INTERVAL_END = 1  # NFT_SET_ELEM_INTERVAL_END
_DATA_VALUE, _DATA_VERDICT = 1, 2
_VERDICT_CODE, _VERDICT_CHAIN = 1, 2
_VERDICTS = {"jump": -3, "goto": -4}  # NFT_JUMP, NFT_GOTO


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a key or a map's value, as the kernel stores it."""

    value: bytes


def addr(text: str) -> Field:
    """An IPv4 or IPv6 address (``ipv4_addr``, ``ipv6_addr``)."""
    family = socket.AF_INET6 if ":" in text else socket.AF_INET
    return Field(socket.inet_pton(family, text))


def port(number: int) -> Field:
    """A transport port (``inet_service``), network byte order."""
    return Field(struct.pack("!H", number))


def proto(number: int) -> Field:
    """An IP protocol number (``inet_proto``): one byte."""
    return Field(struct.pack("B", number))


def ifname(text: str) -> Field:
    """An interface name (``ifname``): the kernel's 16 bytes, NUL-padded."""
    raw = text.encode()
    if not 0 < len(raw) < 16:
        raise ValueError(f"not an interface name: {text!r}")
    return Field(raw.ljust(16, b"\0"))


def integer(number: int) -> Field:
    """A 32-bit integer in host byte order (``numgen`` results, marks)."""
    return Field(struct.pack("=I", number))


def concat(fields: Sequence[Field]) -> bytes:
    """A key or value as the kernel compares it: one field as it is; a
    concatenation with each field in registers of four bytes."""
    if len(fields) == 1:
        return fields[0].value
    return b"".join(f.value + b"\0" * (-len(f.value) % 4) for f in fields)


_ENCODED_HEAD = struct.Struct("=HHHHHH")  # element, its key, the key's value
_ENCODED_DATA = struct.Struct("=HHHH")  # the data, its value


def encoded(key: bytes, data: bytes = b"") -> bytes:
    """One set element (``key``) or data map element (``key``, ``data``) as
    the kernel reads it, from :func:`concat` values.

    For writers holding many elements: the encoding is the element's
    identity (hashable, compact) and costs one concatenation, where
    :class:`Element` costs an object per field.
    """
    head, pad, data_head, data_pad = _framing(len(key), len(data))
    return head + key + pad + data_head + data + data_pad


@functools.lru_cache(maxsize=64)
def encoder(key_len: int, data_len: int) -> Callable[[bytes, bytes], bytes]:
    """:func:`encoded` for many elements of one shape (keys of ``key_len``
    bytes, data of ``data_len``): the framing found once, one join each
    (a third of :func:`encoded`'s cost; a service's slots are most of a
    start's elements)."""
    head, pad, data_head, data_pad = _framing(key_len, data_len)

    def encode(key: bytes, data: bytes) -> bytes:
        return b"".join((head, key, pad, data_head, data, data_pad))

    return encode


def key_of(element: bytes) -> bytes:
    """The key of an :func:`encoded` element."""
    key_attr = _ENCODED_HEAD.unpack_from(element)[4]
    return element[_ENCODED_HEAD.size : _ENCODED_HEAD.size + key_attr - ATTR.size]


def data_of(element: bytes) -> bytes:
    """The data of an :func:`encoded` map element (b"" for a set's)."""
    start = _ENCODED_HEAD.size + len(key_of(element))
    start += -start % 4
    if start + _ENCODED_DATA.size > len(element):
        return b""
    value_attr = _ENCODED_DATA.unpack_from(element, start)[2]
    start += _ENCODED_DATA.size
    return element[start : start + value_attr - ATTR.size]


def with_key(element: bytes, key: bytes) -> bytes:
    """The :func:`encoded` element with another key of the same length."""
    if len(key) != len(key_of(element)):
        raise ValueError("a key of another length changes the framing")
    return element[: _ENCODED_HEAD.size] + key + element[_ENCODED_HEAD.size + len(key) :]


def interval(start: bytes, end: bytes | None) -> tuple[bytes, ...]:
    """The elements of one range of a single-field set with ``flags
    interval``: ``start``, and ``end`` -- the first value past the range --
    flagged as an interval's end (None: the range runs to the last value,
    and has no end element). The kernel finds, for a value, the greatest
    element not above it: a start means inside, an end means outside, so
    ranges must neither overlap nor touch (merge them first); deleting a
    range deletes both elements."""
    first = encoded(start)
    return (first,) if end is None else (first, interval_end(end))


def interval_end(end: bytes) -> bytes:
    """The element ending a range (see :func:`interval`) at ``end``."""
    flags = attr(_ELEM_FLAGS, struct.pack("!I", _INTERVAL_END))
    return nested(_LIST_ELEM, nested(_ELEM_KEY, attr(_DATA_VALUE, end)) + flags)


def ranged(key: bytes, key_end: bytes) -> bytes:
    """A set element covering ``key`` up to ``key_end`` inclusive (a set of
    concatenations with ``flags interval``), from :func:`concat` values."""
    body = nested(_ELEM_KEY, attr(_DATA_VALUE, key))
    body += nested(_ELEM_KEY_END, attr(_DATA_VALUE, key_end))
    return nested(_LIST_ELEM, body)


@functools.lru_cache(maxsize=256)
def _framing(key_len: int, data_len: int) -> tuple[bytes, bytes, bytes, bytes]:
    """The attribute headers and paddings around a key and data of these
    lengths (the same few lengths recur for every element of a set)."""
    key_pad, data_pad = -key_len % 4, -data_len % 4
    key_attr = ATTR.size + key_len
    size = ATTR.size * 3 + key_len + key_pad
    data_head = b""
    if data_len:
        data_attr = ATTR.size + data_len
        data_head = _ENCODED_DATA.pack(
            ATTR.size + data_attr + data_pad, _ELEM_DATA | NESTED, data_attr, _DATA_VALUE
        )
        size += len(data_head) + data_len + data_pad
    head = _ENCODED_HEAD.pack(
        size,
        _LIST_ELEM | NESTED,
        ATTR.size + key_attr + key_pad,
        _ELEM_KEY | NESTED,
        key_attr,
        _DATA_VALUE,
    )
    return head, b"\0" * key_pad, data_head, b"\0" * data_pad


@dataclass(frozen=True, slots=True)
class Verdict:
    """A verdict map's value: ``jump`` or ``goto`` ``chain`` (of the map's table)."""

    kind: str
    chain: str


@dataclass(frozen=True, slots=True)
class Element:
    """A set element (``key``); a map element (``key`` and ``data``); a
    verdict map element (``key`` and ``verdict``)."""

    key: tuple[Field, ...]
    data: tuple[Field, ...] = ()
    verdict: Verdict | None = None


@dataclass(frozen=True, slots=True)
class ElementChange:
    """Add or delete ``elements`` of one set or map of one table, or flush it
    (``op`` "flush": every element goes; ``elements`` must be empty)."""

    op: str  # "add", "delete" or "flush"
    family: int  # NFPROTO_IPV4, NFPROTO_IPV6, NFPROTO_INET
    table: str
    set: str
    elements: tuple[Element | bytes, ...]  # bytes: already :func:`encoded`


def _element(element: Element | bytes) -> bytes:
    if isinstance(element, bytes):
        return element
    if element.verdict is None:
        return encoded(concat(element.key), concat(element.data) if element.data else b"")
    return verdict_element(concat(element.key), element.verdict)


def verdict_element(key: bytes, verdict: Verdict) -> bytes:
    """A verdict map's element (``key`` from :func:`concat`), encoded: its
    identity for writers that keep elements as bytes, as the reader
    encodes it again."""
    code = _VERDICTS.get(verdict.kind)
    if code is None:
        raise ValueError(f"verdict {verdict.kind!r} is not jump or goto")
    body = nested(_ELEM_KEY, attr(_DATA_VALUE, key))
    value = attr(_VERDICT_CODE, struct.pack("!i", code))
    value += attr(_VERDICT_CHAIN, name(verdict.chain))
    body += nested(_ELEM_DATA, nested(_DATA_VERDICT, value))
    return nested(_LIST_ELEM, body)


# An attribute's length is 16 bits, so one message carries at most this much
# of a change's elements; a larger change is split over several messages of
# the same batch (still one transaction).
_ELEMENTS_PER_MESSAGE = 60_000
_OPS = {"add": _NEWSETELEM, "delete": _DELSETELEM, "flush": _DELSETELEM}


def _chunks(change: ElementChange) -> list[bytes]:
    """The encoded elements of ``change``, split so each part fits one attribute."""
    if change.op == "flush":
        if change.elements:
            raise ValueError("a flush names no elements")
        return [b""]
    parts: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for element in change.elements:
        encoded = _element(element)
        if current and size + len(encoded) > _ELEMENTS_PER_MESSAGE:
            parts.append(b"".join(current))
            current, size = [], 0
        current.append(encoded)
        size += len(encoded)
    parts.append(b"".join(current))
    return parts


def encode_batch(
    changes: Iterable[ElementChange], first_seq: int = 1
) -> tuple[bytearray, list[int]]:
    """The whole transaction: batch begin, the changes' messages (each asking
    for an acknowledgement, sequence numbers from ``first_seq``), batch end;
    and, per message, the index of the change it belongs to.

    A flush is a delete naming no elements, which the kernel reads as "all".
    The messages are appended to one buffer as they are made: a list of
    them joined at the end held the batch twice, and a whole write's batch
    is 10 MB at 10,000 services (the driver's peak memory is this moment).
    """
    out = bytearray(message(BATCH_BEGIN, F_REQUEST, 0, socket.AF_UNSPEC))
    owners: list[int] = []
    seq = first_seq
    for index, change in enumerate(changes):
        op = _OPS.get(change.op)
        if op is None:
            raise ValueError(f"element change {change.op!r} is not add, delete or flush")
        kind = (SUBSYS_NFTABLES << 8) | op
        flags = F_REQUEST | F_ACK | (F_CREATE if change.op == "add" else 0)
        head = attr(_LIST_TABLE, name(change.table)) + attr(_LIST_SET, name(change.set))
        for part in _chunks(change):
            body = head + (nested(_LIST_ELEMENTS, part) if change.op != "flush" else b"")
            out += message(kind, flags, seq, change.family, body)
            owners.append(index)
            seq += 1
    out += message(BATCH_END, F_REQUEST, seq, socket.AF_UNSPEC)
    return out, owners


# Who writes element changes, as one transaction: an ElementWriter, or a
# fake in tests. The changes may be an iterator, read once (a whole write
# made as it is encoded).
ElementSink = Callable[[Iterable[ElementChange]], None]


class ElementWriter:
    """Writes element changes as one transaction.

    Raises:
        OSError: the kernel refused a change (its errno, and which change
            in the message; nothing was applied), or the socket failed.
    """

    def __init__(self, sock: Callable[[], socket.socket] = netfilter_socket) -> None:
        self._socket = sock

    def __call__(self, changes: Iterable[ElementChange]) -> None:
        said: list[str] = []  # each change, for the error naming it (not the change itself)

        def told() -> Iterator[ElementChange]:
            for change in changes:
                said.append(
                    f"{change.op} of {len(change.elements)} elements in {change.table} {change.set}"
                )
                yield change

        batch, owners = encode_batch(told())
        if not said:
            return
        self._transact(batch, owners, lambda index: f"change {index} ({said[index]})")

    def send_rules(self, rules: Sequence[bytes]) -> None:
        """Other messages (rules, :mod:`~dataplane.linux.nftables.rule_messages`)
        as one transaction, each acknowledged; their sequence numbers are
        set here.

        Raises:
            OSError: as for element changes.
        """
        if not rules:
            return
        out = [message(BATCH_BEGIN, F_REQUEST, 0, socket.AF_UNSPEC)]
        for seq, rule in enumerate(rules, start=1):
            out.append(rule[:8] + struct.pack("=I", seq) + rule[12:])
        out.append(message(BATCH_END, F_REQUEST, len(rules) + 1, socket.AF_UNSPEC))
        self._transact(b"".join(out), list(range(len(rules))), lambda i: f"rule {i}")

    def _transact(
        self, batch: bytes | bytearray, owners: list[int], describe: Callable[[int], str]
    ) -> None:
        """Send one batch; raise for the first message the kernel refused."""
        sock = self._socket()
        try:
            # The kernel takes a batch from one datagram: make room for it
            # (as nft does; the default buffer holds ~200 kB, a full load of
            # 5,000 services is ~5 MB).
            if len(batch) > sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 2:
                sock.setsockopt(socket.SOL_SOCKET, _SO_SNDBUFFORCE, len(batch) + 4096)
            sock.send(batch)
            answers = self._answers(sock, len(owners))
        finally:
            sock.close()
        refused = sorted((seq, code) for seq, code in answers.items() if code)
        if refused:
            seq, code = refused[0]
            raise OSError(code, f"{os.strerror(code)}: {describe(owners[seq - 1])}")

    @staticmethod
    def _answers(sock: socket.socket, count: int) -> dict[int, int]:
        """errno (0: done) by sequence number, until every change has its answer."""
        out: dict[int, int] = {}
        for kind, seq, body in messages(sock):
            if kind == NLMSG_ERROR and 1 <= seq <= count:
                (code,) = ERR.unpack_from(body)
                out[seq] = -code
                if len(out) == count:
                    break
        return out
