"""What the VXLAN programmer does with an error: the kernel's, or a bug.

A fake netlink handle raises from ``link get``, the first call of every
apply: the kernel refusing (pyroute2's ``NetlinkError``), the device being
absent (``ENODEV``, not an error), or a bug in our own code.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from pyroute2.netlink.exceptions import NetlinkError  # type: ignore[import-untyped]

from dataplane.errors import ProgrammingError
from dataplane.linux.netlink.links import LinkMonitor
from dataplane.linux.netlink.vxlan import VxlanProgrammer


class RaisingHandle:
    """No links; ``link("get", ...)`` raises ``error`` (None: no such device)."""

    def __init__(self, error: Exception | None) -> None:
        self.error = error

    def __call__(self) -> RaisingHandle:
        return self

    def get_links(self) -> list[dict[str, Any]]:
        return []

    def link(self, command: str, **kwargs: Any) -> list[dict[str, Any]]:
        assert command == "get", command
        raise self.error if self.error is not None else NetlinkError(19, "No such device")

    def close(self) -> None:
        pass


def programmer(handle: RaisingHandle) -> VxlanProgrammer:
    return VxlanProgrammer(handle, LinkMonitor(handle), writer=lambda requests: [])


def test_no_device_is_no_error() -> None:
    trio.run(programmer(RaisingHandle(None)).apply)


def test_a_kernel_error_fails_the_apply_with_its_cause() -> None:
    refused = NetlinkError(1, "Operation not permitted")
    vxlan = programmer(RaisingHandle(refused))

    async def main() -> None:
        with pytest.raises(ProgrammingError, match="vxlan: NetlinkError") as caught:
            await vxlan.apply()
        assert caught.value.__cause__ is refused

    trio.run(main)


def test_a_bug_is_not_taken_for_the_kernel_refusing() -> None:
    vxlan = programmer(RaisingHandle(KeyError("IFLA_LINKINFO")))
    with pytest.raises(KeyError):
        trio.run(vxlan.apply)
