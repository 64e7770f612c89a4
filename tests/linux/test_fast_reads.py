"""The platform's netlink handle: pyroute2 only when a call needs it, and its
errors as the kernel errors the programmers catch."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from typing import Any

import pytest
from pyroute2.netlink.exceptions import (  # type: ignore[import-untyped]
    NetlinkDecodeError,
)
from pyroute2.netlink.exceptions import (
    NetlinkError as Pyroute2Error,
)

from dataplane.linux.kernel.errors import KERNEL_ERRORS, NetlinkError
from dataplane.linux.netlink.dump import FastReads


class Pyroute2Like:
    """Answers as pyroute2's IPRoute does: lists, lazy generators, its own errors."""

    opened = 0

    def __init__(self, error: Exception | None = None) -> None:
        Pyroute2Like.opened += 1
        self.error = error

    def link(self, command: str, **kwargs: Any) -> list[dict[str, Any]]:
        if self.error is not None:
            raise self.error
        return [{"index": 3, "ifname": kwargs["ifname"]}]

    def get_addr(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        yield {"index": 3}
        if self.error is not None:
            raise self.error  # as pyroute2's lazy dumps do, on iteration

    def close(self) -> None:
        pass


def test_no_pyroute2_handle_is_made_until_a_call_needs_one() -> None:
    Pyroute2Like.opened = 0
    handle = FastReads(Pyroute2Like)
    handle.close()
    assert Pyroute2Like.opened == 0
    assert handle.link("get", ifname="eth0") == [{"index": 3, "ifname": "eth0"}]
    assert handle.get_addr(family=2) == [{"index": 3}]
    assert Pyroute2Like.opened == 1  # one handle, kept until closed
    with pytest.raises(AttributeError):
        handle._private  # noqa: B018 - no call is made for private names


@pytest.mark.parametrize("call", ["link", "get_addr"])
def test_a_refusal_is_a_kernel_error_with_its_errno_and_cause(call: str) -> None:
    refused = Pyroute2Error(errno.EPERM)
    handle = FastReads(lambda: Pyroute2Like(refused))
    with pytest.raises(NetlinkError) as caught:
        if call == "link":
            handle.link("get", ifname="eth0")
        else:
            handle.get_addr(family=2)
    assert isinstance(caught.value, KERNEL_ERRORS)
    assert (caught.value.errno, caught.value.code) == (errno.EPERM, errno.EPERM)
    assert caught.value.__cause__ is refused


def test_an_undecodable_reply_is_a_kernel_error() -> None:
    handle = FastReads(lambda: Pyroute2Like(NetlinkDecodeError(ValueError("short"))))
    with pytest.raises(NetlinkError, match="undecodable netlink reply: short") as caught:
        handle.link("get", ifname="eth0")
    assert caught.value.errno == errno.EBADMSG


def test_a_bug_is_not_taken_for_the_kernel_refusing() -> None:
    handle = FastReads(lambda: Pyroute2Like(KeyError("IFLA_LINKINFO")))
    with pytest.raises(KeyError):
        handle.link("get", ifname="eth0")
