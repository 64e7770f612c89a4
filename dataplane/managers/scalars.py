"""Validated scalars from messages: addresses, CIDRs, IP set members, names.

Each function returns the canonical text of one value or raises
:class:`InputError` naming the field and the value. They run for every IP
set member Felix sends, so they use the C parsers (inet_pton/inet_ntop)
rather than the ipaddress module, which is several times slower. inet_pton
is as strict as ipaddress: no leading zeros, no short forms, no
whitespace, no scope ids.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

from dataplane.errors import InputError
from dataplane.model import IPSetType
from dataplane.wire._pb import felixbackend_pb2 as pb

__all__ = ["address", "at", "cidr", "dotted_quad", "ipset_members", "ipset_type", "non_empty"]

_IPSET_TYPES: dict[int, IPSetType] = {
    pb.IPSetUpdate.IP: IPSetType.IP,
    pb.IPSetUpdate.IP_AND_PORT: IPSetType.IP_AND_PORT,
    pb.IPSetUpdate.NET: IPSetType.NET,
}
_MEMBER_PROTOCOLS = frozenset({"tcp", "udp", "sctp"})

_AF = {4: socket.AF_INET, 6: socket.AF_INET6}


def _parse_address(text: str) -> tuple[int, bytes] | None:
    """(version, packed) for a valid address, else None."""
    family, version = (socket.AF_INET6, 6) if ":" in text else (socket.AF_INET, 4)
    try:
        return version, socket.inet_pton(family, text)
    except (OSError, ValueError):
        return None


def dotted_quad(text: str) -> bool:
    """Whether ``text`` is an IPv4 address as :func:`address` returns it:
    the dotted quads ``inet_pton`` takes are canonical as written. For the
    callers that run per backend and name a field only to refuse one."""
    try:
        socket.inet_pton(socket.AF_INET, text)
    except (OSError, ValueError):  # ValueError: a NUL in the text
        return False
    return True


def address(text: str, field: str, version: int | None = None) -> str:
    """Canonical text of a single address."""
    parsed = _parse_address(text)
    if parsed is None:
        raise InputError(field, text, "not an IP address")
    if version is not None and parsed[0] != version:
        raise InputError(field, text, f"not an IPv{version} address")
    # Dotted quads inet_pton accepts are already canonical.
    return text if parsed[0] == 4 else socket.inet_ntop(socket.AF_INET6, parsed[1])


def cidr(text: str, field: str, version: int | None = None) -> str:
    """Canonical text of a network; host bits are cleared, as the kernel does."""
    base, slash, length_text = text.partition("/")
    parsed = _parse_address(base)
    if parsed is None:
        raise InputError(field, text, "not a CIDR")
    got, packed = parsed
    if version is not None and got != version:
        raise InputError(field, text, f"not an IPv{version} CIDR")
    bits = 32 if got == 4 else 128
    if not slash:
        length = bits
    elif length_text.isdigit() and len(length_text) <= 3 and int(length_text) <= bits:
        length = int(length_text)
    else:
        raise InputError(field, text, "not a CIDR")
    value = int.from_bytes(packed, "big") & ~((1 << (bits - length)) - 1)
    network = socket.inet_ntop(_AF[got], value.to_bytes(bits // 8, "big"))
    return f"{network}/{length}"


def _ip_member(text: str, field: str) -> str:
    if ":" not in text and "/" not in text:
        # Fast path for the common case, a plain IPv4 address.
        try:
            socket.inet_pton(socket.AF_INET, text)
        except (OSError, ValueError):  # ValueError: an embedded NUL
            raise InputError(field, text, "not an IP address") from None
        return text
    # Felix sends bare addresses; accept a full-length prefix too.
    base, slash, length = text.partition("/")
    addr = address(base, field)
    if slash and length != ("32" if ":" not in addr else "128"):
        raise InputError(field, text, "IP-type sets hold single addresses")
    return addr


def _ip_port_member(text: str, field: str) -> str:
    addr_text, comma, proto_port = text.rpartition(",")
    protocol, colon, port_text = proto_port.partition(":")
    if not comma or not colon:
        raise InputError(field, text, "expected <address>,<protocol>:<port>")
    protocol = protocol.lower()
    if protocol not in _MEMBER_PROTOCOLS:
        raise InputError(field, text, "protocol must be tcp, udp or sctp")
    port = _port_number(port_text, field, text)
    return f"{address(addr_text, field)},{protocol}:{port}"


def _port_number(text: str, field: str, whole: object) -> int:
    try:
        port = int(text)
    except ValueError:
        raise InputError(field, whole, "port is not a number") from None
    if not 0 <= port <= 65535:
        raise InputError(field, whole, "port out of range 0-65535")
    return port


_MEMBER_PARSERS = {
    IPSetType.IP: _ip_member,
    IPSetType.NET: cidr,
    IPSetType.IP_AND_PORT: _ip_port_member,
}


def ipset_type(value: int) -> IPSetType:
    try:
        return _IPSET_TYPES[value]
    except KeyError:
        raise InputError("type", value, "unknown IP set type") from None


def ipset_members(kind: IPSetType, members: Sequence[str], field: str) -> set[str]:
    if not members:
        return set()
    parse = _MEMBER_PARSERS[kind]
    try:
        return {parse(member, field) for member in members}
    except InputError:
        pass
    # A bad member: find it again to name its index and the whole member (the
    # parsers may complain about a part of it, e.g. the address of "x,tcp:80").
    for index, member in enumerate(members):
        try:
            parse(member, field)
        except InputError as exc:
            raise type(exc)(f"{field}[{index}]", member, exc.reason) from None
    raise AssertionError("unreachable: a member failed to parse once, not twice")


def at(exc: InputError, field: str) -> InputError:
    """The same complaint, about the element at ``field``."""
    return type(exc)(field, exc.value, exc.reason)


def non_empty(text: str, field: str) -> str:
    if not text:
        raise InputError(field, text, "must not be empty")
    return text
