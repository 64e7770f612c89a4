"""What the VXLAN programmer does with an error: the kernel's, or a bug.

A fake netlink handle lists a link of the device's name and raises from
``link get``, the first call of every apply that looks at it: the kernel
refusing (``NetlinkError``, as the platform's handle raises pyroute2's),
the device being absent (``ENODEV``, not an error), or a bug in our own
code.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.errors import NetlinkError
from dataplane.linux.netlink.links import LinkMonitor
from dataplane.linux.netlink.overlay_plan import DEVICE_NAMES, FamilyPlan, OverlayPlan, VxlanDevice
from dataplane.linux.netlink.vxlan import VxlanProgrammer


class RaisingHandle:
    """A link named as the IPv4 device in the dump; ``link("get", ...)``
    raises ``error`` (None: no such device, it went meanwhile)."""

    def __init__(
        self, error: Exception | None, listed: tuple[str, ...] = (DEVICE_NAMES[4],)
    ) -> None:
        self.error = error
        self.listed = listed
        self.asked: list[str] = []

    def __call__(self) -> RaisingHandle:
        return self

    def get_links(self) -> list[dict[str, Any]]:
        return [{"ifname": name, "index": 7, "flags": 0} for name in self.listed]

    def link(self, command: str, **kwargs: Any) -> list[dict[str, Any]]:
        assert command == "get", command
        self.asked.append(kwargs["ifname"])
        raise self.error if self.error is not None else NetlinkError(19, "No such device")

    def close(self) -> None:
        pass


def programmer(handle: RaisingHandle) -> VxlanProgrammer:
    return VxlanProgrammer(handle, LinkMonitor(handle), writer=lambda requests: [])


def test_no_device_is_no_error() -> None:
    trio.run(programmer(RaisingHandle(None)).apply)


def test_without_vxlan_no_device_is_asked_for_that_the_links_do_not_list() -> None:
    # The one call that made every node load pyroute2 at its first apply.
    quiet = RaisingHandle(NetlinkError(1, "Operation not permitted"), listed=("eth0",))
    trio.run(programmer(quiet).apply)
    assert quiet.asked == []
    listed = RaisingHandle(None)
    trio.run(programmer(listed).apply)
    assert listed.asked == [DEVICE_NAMES[4]]


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


class NoParent(RaisingHandle):
    """No VXLAN device yet, and no interface holding the VTEP's parent address."""

    def get_addr(self, **kwargs: Any) -> list[dict[str, Any]]:
        return []


def test_a_device_that_cannot_be_made_is_held_back_and_reported_once() -> None:
    device = VxlanDevice(
        name=DEVICE_NAMES[4],
        version=4,
        vni=4096,
        port=4789,
        mac="66:00:00:00:00:01",
        local="192.0.2.1",
        address="10.65.0.1",
        mtu=0,
        overhead=50,
    )
    vxlan = programmer(NoParent(None))
    vxlan.set_plan(OverlayPlan({4: FamilyPlan(device=device)}))
    trio.run(vxlan.apply)  # not an error of the apply: retried, reported
    (why,) = vxlan.held_back().values()
    assert "no interface holds the VTEP parent address 192.0.2.1" in why
    assert vxlan.take_refusals() == [(DEVICE_NAMES[4], why)]
    trio.run(vxlan.apply)
    assert vxlan.take_refusals() == []  # once, not at every retry
    assert vxlan.held_back() == {DEVICE_NAMES[4]: why}
