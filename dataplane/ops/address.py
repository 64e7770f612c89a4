"""Where the operator's HTTP server listens: ``HOST:PORT`` parsed and kept.

Apart from :mod:`dataplane.ops.server` so that the command line can take
``--listen`` without importing the server (and prometheus-client with it)
on a driver that serves nothing.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

__all__ = ["ListenAddress", "listen_address"]


@dataclass(frozen=True, slots=True)
class ListenAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def listen_address(text: str) -> ListenAddress:
    """``HOST:PORT``, ``[V6]:PORT`` or ``:PORT`` (loopback only); an argparse type.

    Raises:
        ValueError: not an IP address and a port.
    """
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: expected HOST:PORT or :PORT")
    host = host.removeprefix("[").removesuffix("]") or "127.0.0.1"
    ipaddress.ip_address(host)  # ValueError if not an address
    return ListenAddress(host, int(port_text))
