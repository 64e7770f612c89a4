"""The errors a call into the kernel can raise, and only those.

A programmer turns one of these into a
:class:`~dataplane.errors.ProgrammingError` (the apply fails, the state is
re-read and the next apply retries it) and keeps it as the cause. Anything
else out of a programmer is a bug (a ``TypeError``, a ``KeyError``): it must
reach the loop as itself and stop the driver loudly, not be retried at every
apply for ever as if the kernel had refused something.

Netlink through pyroute2 raises :class:`NetlinkError` (an errno from the
kernel) and its decode errors (a reply it cannot parse), none of them an
``OSError``; our own batch writer and dumps raise ``OSError``.
"""

from __future__ import annotations

from pyroute2.netlink.exceptions import (  # type: ignore[import-untyped]
    NetlinkDecodeError,
    NetlinkError,
)

__all__ = ["KERNEL_ERRORS", "NetlinkError"]

KERNEL_ERRORS: tuple[type[Exception], ...] = (OSError, NetlinkError, NetlinkDecodeError)
