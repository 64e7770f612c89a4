"""How each option's text is read: one function per kind of value.

Each takes the text as typed (on the command line or in its ``DATAPLANE_*``
variable) and returns the value, or raises :class:`argparse.ArgumentTypeError`
whose message quotes the text and says what is accepted; the parser puts
the option's or the variable's name in front (``argument --max-frame-bytes:
'0': expected a whole number, 1 or more``). Nothing here is reached by a
traceback: every failure is one of those lines and exit 2.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
from collections.abc import Callable
from typing import Any

from dataplane.config_values import status_path_prefix
from dataplane.ops.address import ListenAddress, listen_address

__all__ = [
    "chain_prefix",
    "enum",
    "ip_address",
    "listen",
    "one_of",
    "positive_int",
    "rate",
    "seconds",
    "status_prefix",
]


def positive_int(text: str) -> int:
    """A whole number, 1 or more (a size, a count)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number, 1 or more")
    return value


def _number(text: str, *, zero: bool, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    # NaN and infinity are no durations; "not value > 0" also refuses NaN.
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        floor = "0 or more" if zero else "more than 0"
        raise argparse.ArgumentTypeError(f"{text!r}: expected {what}, {floor}")
    return value


def seconds(*, zero: bool = True) -> Callable[[str], float]:
    """A duration in seconds: a finite number, 0 or more (or more than 0)."""

    def read(text: str) -> float:
        return _number(text, zero=zero, what="a number of seconds")

    read.__name__ = "seconds"
    return read


def rate(text: str) -> float:
    """Calls a second: a finite number, 0 (no limit) or more."""
    return _number(text, zero=True, what="a number of calls a second")


def listen(text: str) -> ListenAddress:
    """``HOST:PORT``, ``[V6]:PORT`` or ``:PORT``, HOST an IP address."""
    try:
        return listen_address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected HOST:PORT with HOST an IP address ([V6]:PORT for IPv6)"
            " and PORT 0-65535, or :PORT for 127.0.0.1"
        ) from None


def status_prefix(text: str) -> str:
    """An absolute directory, or "" for none."""
    try:
        return status_path_prefix(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def ip_address(text: str) -> str:
    """An IPv4 or IPv6 address, as ``ipaddress`` prints it."""
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an IP address") from None


_CHAIN_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,7}")


def chain_prefix(text: str) -> str:
    """What starts every chain (and nftables table) name of ours: it goes into
    restore files and command lines, and leaves room in iptables' 28
    characters for the rest of the name."""
    if not _CHAIN_PREFIX.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected 1-8 letters, digits, '-' or '_', starting with a letter"
        )
    return text


def one_of(*choices: str) -> Callable[[str], str]:
    """One of ``choices``, given in any case as Felix reads its own enumerations
    (``debug`` is a log level); a wrong one is named as the user typed it."""
    by_key = {choice.casefold(): choice for choice in choices}

    def read(text: str) -> str:
        found = by_key.get(text.casefold())
        if found is None:
            raise argparse.ArgumentTypeError(f"{text!r}: expected one of {', '.join(choices)}")
        return found

    read.__name__ = "choice"
    return read


def enum(*choices: str) -> dict[str, Any]:
    """An argparse option's ``type`` and ``choices`` (for ``--help``) from one list."""
    return {"type": one_of(*choices), "choices": list(choices)}
