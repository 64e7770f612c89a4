"""Sockets of another network namespace, for the raw netlink writers.

A socket belongs to the namespace its creator was in when it was made and
stays there. The tools run as ``ip netns exec NAME ...``; a socket the
driver opens itself (the nf_tables element writer) is made here: the
calling thread enters the namespace (``setns(2)``, per thread), makes the
socket and goes back at once. Nothing else runs on the thread meanwhile,
because nothing here awaits.

Python 3.11 has no ``os.setns``, hence the one ``ctypes`` call (glibc's
``int setns(int fd, int nstype)``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
from collections.abc import Callable

__all__ = ["socket_in"]

_CLONE_NEWNET = 0x40000000


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(ctypes.c_int(fd), ctypes.c_int(_CLONE_NEWNET)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setns: {os.strerror(code)}")


def socket_in(netns: str | None, make: Callable[[], socket.socket]) -> socket.socket:
    """``make()`` run inside the named namespace (None: the caller's own).

    Raises:
        OSError: no such namespace, or entering it was refused.
    """
    if netns is None:
        return make()
    if "/" in netns or netns in {"", ".", ".."}:
        raise OSError(errno.EINVAL, f"not a namespace name: {netns!r}")
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            return make()
        finally:
            _setns(home)
    finally:
        os.close(home)
