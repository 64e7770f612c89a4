"""The errors a call into the kernel can raise, and only those.

A programmer turns one of these into a
:class:`~dataplane.errors.ProgrammingError` (the apply fails, the state is
re-read and the next apply retries it) and keeps it as the cause. Anything
else out of a programmer is a bug (a ``TypeError``, a ``KeyError``): it must
reach the loop as itself and stop the driver loudly, not be retried at every
apply for ever as if the kernel had refused something.

Netlink through pyroute2 raises pyroute2's own classes (an errno from the
kernel, or a reply it cannot decode), none of them an ``OSError``; the
one door to pyroute2 (:class:`~dataplane.linux.netlink.dump.FastReads`)
turns them into :class:`NetlinkError` here, so that importing this
module, and catching what the kernel says, never imports pyroute2 (a
tenth of a second and 20 MB a node without VXLAN need not pay). Our own
batch writer and dumps raise ``OSError`` as they are.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["KERNEL_ERRORS", "NetlinkError", "pyroute2_errors"]


class NetlinkError(OSError):
    """The kernel refused a netlink request (``errno``), or its reply could
    not be decoded (``EBADMSG``)."""

    @property
    def code(self) -> int:
        """The errno, under the name pyroute2's class gives it."""
        return self.errno or 0


KERNEL_ERRORS: tuple[type[Exception], ...] = (OSError,)


@contextmanager
def pyroute2_errors() -> Iterator[None]:
    """Around a call into pyroute2: its errors raised as :class:`NetlinkError`."""
    try:
        yield
    except Exception as exc:
        # Only reached once pyroute2 has raised, so it is imported already.
        from pyroute2.netlink.exceptions import (  # type: ignore[import-untyped]  # noqa: PLC0415
            NetlinkDecodeError,
        )
        from pyroute2.netlink.exceptions import (  # noqa: PLC0415
            NetlinkError as Refused,
        )

        if isinstance(exc, Refused):
            raise NetlinkError(exc.code, str(exc.args[-1] if exc.args else exc)) from exc
        if isinstance(exc, NetlinkDecodeError):
            raise NetlinkError(
                errno.EBADMSG, f"undecodable netlink reply: {exc.exception}"
            ) from exc
        raise
