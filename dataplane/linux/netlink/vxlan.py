"""VxlanProgrammer: the VXLAN devices, and their neighbour and FDB entries.

Per family it makes the kernel match the plan (:mod:`dataplane.linux.netlink.overlay_plan`):

- the device (``vxlan.calico``, ``vxlan-v6.calico``) exists with the VNI,
  port, source address and parent the plan says, learning off, this node's
  VTEP MAC, the MTU, the tunnel address and up. A device whose VNI, port,
  source or parent drifted cannot be changed in place: it is deleted and
  made again, as Felix does; MAC, MTU, address and state are set in place.
  A family VXLAN is off for loses its device (and with it every neighbour,
  FDB entry and route through it).
- one permanent neighbour entry per remote VTEP (tunnel address -> VTEP
  MAC) and one FDB entry (VTEP MAC -> the node's parent address); stale
  ones go. Only permanent entries are ours: the kernel's own are left be.

Blocking netlink calls (the device, its address and reads of its entries
through pyroute2, entries written many per system call through
:mod:`dataplane.linux.netlink.batch`), so
:meth:`apply` runs them in a worker thread with a fresh handle each time.
What it could not do (the parent address is on no interface yet, the
kernel refused an entry) is kept in :attr:`failing`
and retried at the next apply; everything else is still programmed.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import Any

import trio

from dataplane.core.quarantine import Unsaid
from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.errors import KERNEL_ERRORS, NetlinkError
from dataplane.linux.netlink.batch import NeighRequest, NetlinkBatch, NetlinkWriter
from dataplane.linux.netlink.links import LinkMonitor
from dataplane.linux.netlink.overlay_plan import (
    DEVICE_NAMES,
    FamilyPlan,
    FdbEntry,
    Neighbour,
    OverlayPlan,
    VxlanDevice,
)

__all__ = ["VxlanProgrammer"]

log = logging.getLogger(__name__)

_NUD_PERMANENT = 0x80
_NTF_SELF = 0x02
_ENODEV = 19
_ENOENT = 2
_FAMILY = {4: socket.AF_INET, 6: socket.AF_INET6}


def _code(exc: Exception) -> int | None:
    code = getattr(exc, "code", None)
    return code if isinstance(code, int) else None


def _devices(plans: dict[int, FamilyPlan]) -> dict[int, VxlanDevice | None]:
    return {version: plan.device for version, plan in plans.items()}


def _data(link: Any) -> Any:
    info = link.get("IFLA_LINKINFO")
    return info.get("IFLA_INFO_DATA") if info is not None else None


class VxlanProgrammer:
    def __init__(
        self,
        netlink: Callable[[], Any],
        links: LinkMonitor,
        writer: NetlinkWriter | None = None,
    ) -> None:
        self._netlink = netlink
        self._writer = writer or NetlinkBatch()
        self._links = links
        self._plans: dict[int, FamilyPlan] = {}
        self._dirty = True
        # Whether the next apply looks at the devices themselves (link,
        # parent, address) or only at their entries: a VTEP joining changes
        # entries only, and the link monitor reports any change to a device.
        self._check_devices = True
        self._indexes: dict[int, int] = {}  # version -> device index as last checked
        # Neighbour and FDB entries the kernel holds, per device; None: read again.
        self._neighbours: dict[int, set[Neighbour]] | None = None
        self._fdb: dict[int, set[FdbEntry]] | None = None
        self.failing: dict[str, str] = {}  # what -> why, as of the last apply
        self._unsaid: Unsaid[str] = Unsaid()  # what take_refusals has not returned yet

    def set_plan(self, plan: OverlayPlan) -> None:
        plans = dict(plan.families)
        if plans != self._plans:
            if _devices(plans) != _devices(self._plans):
                self._check_devices = True
            self._plans = plans
            self._dirty = True

    def mark_for_resync(self) -> None:
        """Check the devices and re-read every entry at the next apply (refresh timer)."""
        self._neighbours = None
        self._fdb = None
        self._check_devices = True
        self._dirty = True

    def links_changed(self) -> None:
        """A link came, went or changed state: check the devices at the next apply."""
        self._check_devices = True
        self._dirty = True

    async def apply(self) -> None:
        if not self._dirty and not self.failing:
            return
        # Cleared before the work, so that a link event arriving while the
        # thread runs is kept for the next apply rather than lost.
        check_devices = self._check_devices or bool(self.failing)
        self._dirty = self._check_devices = False
        try:
            await trio.to_thread.run_sync(self._sync, check_devices)
        except KERNEL_ERRORS as exc:
            self.mark_for_resync()
            raise ProgrammingError(f"vxlan: {type(exc).__name__}: {exc}") from exc

    def held_back(self) -> dict[str, str]:
        """What is not as desired after the last apply, and why: devices by
        name, entries as ``neighbour ...`` / ``fdbentry ...``."""
        return dict(self.failing)

    def take_refusals(self) -> list[tuple[str, str]]:
        """(what, why) failing since the last call, or failing for a new reason:
        one report per failure, not per retry."""
        return self._unsaid.news(self.failing)

    async def cleanup_all(self) -> None:
        self._plans = {}
        self.mark_for_resync()
        await self.apply()

    # --- the worker-thread side ---------------------------------------------------

    def _sync(self, check_devices: bool) -> None:
        handle = self._netlink()
        try:
            failing: dict[str, str] = {}
            changed = False
            for version, name in DEVICE_NAMES.items():
                plan = self._plans.get(version, FamilyPlan())
                changed |= self._sync_family(
                    handle, version, name, plan, failing, check_devices=check_devices
                )
            self.failing = failing
            if changed:
                self._links.mark_stale()  # routes look their device up again
        finally:
            handle.close()

    def _sync_family(
        self,
        handle: Any,
        version: int,
        name: str,
        plan: FamilyPlan,
        failing: dict[str, str],
        *,
        check_devices: bool,
    ) -> bool:
        if not check_devices:
            index = self._indexes.get(version)
            if index is not None and plan.device is not None:
                self._sync_entries(handle, version, index, plan, failing)
                return False
            if index is None and plan.device is None:
                return False
        self._indexes.pop(version, None)
        if plan.device is None:
            # None wanted: only a device of ours left behind needs a look,
            # and the links already read say whether one of that name exists
            # (asking for it by name would load pyroute2 on every node).
            self._links.refresh()
            if name not in self._links.links:
                return False
        link = self._get_link(handle, name)
        if plan.device is None:
            if link is None:
                return False
            info = link.get("IFLA_LINKINFO")
            if info is None or info.get("IFLA_INFO_KIND") != "vxlan":
                failing[name] = "an interface of that name exists that is not VXLAN; left alone"
                return False
            handle.link("del", index=link["index"])
            return True
        device = plan.device
        parent = self._parent(handle, device.local)
        if parent is None:
            failing[name] = f"no interface holds the VTEP parent address {device.local}"
            return False
        index, changed = self._ensure_device(handle, device, link, parent)
        self._sync_address(handle, device, index)
        self._indexes[version] = index
        self._sync_entries(handle, version, index, plan, failing)
        return changed

    @staticmethod
    def _get_link(handle: Any, name: str) -> Any:
        try:
            links = handle.link("get", ifname=name)
        except NetlinkError as exc:
            if _code(exc) == _ENODEV:
                return None
            raise
        return links[0] if links else None

    @staticmethod
    def _parent(handle: Any, address: str) -> tuple[int, int] | None:
        """(index, MTU) of the interface holding ``address``."""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        for addr in handle.get_addr(family=family, address=address):
            for link in handle.get_links(addr["index"]):
                return link["index"], link.get("IFLA_MTU") or link.get("mtu")
        return None

    def _ensure_device(
        self, handle: Any, device: VxlanDevice, link: Any, parent: tuple[int, int]
    ) -> tuple[int, bool]:
        """The device's index, and whether it was (re)made."""
        parent_index, parent_mtu = parent
        mtu = device.mtu or parent_mtu - device.overhead
        wanted = {
            "IFLA_VXLAN_ID": device.vni,
            "IFLA_VXLAN_PORT": device.port,
            "IFLA_VXLAN_LINK": parent_index,
            "IFLA_VXLAN_LEARNING": 0,
        }
        local_key = "IFLA_VXLAN_LOCAL" if device.version == 4 else "IFLA_VXLAN_LOCAL6"
        if link is not None:
            data = _data(link)
            held = {k: data.get(k) for k in wanted} if data is not None else {}
            local = data.get(local_key) if data is not None else None
            if held == wanted and local == device.local:
                index: int = link["index"]
                changes: dict[str, Any] = {}
                if (link.get("IFLA_ADDRESS") or "").lower() != device.mac:
                    changes["address"] = device.mac
                if link.get("IFLA_MTU") != mtu:
                    changes["mtu"] = mtu
                if not link["flags"] & 1:
                    changes["state"] = "up"
                if changes:
                    handle.link("set", index=index, **changes)
                return index, False
            log.warning(
                "%s: %s differs from the plan; making it again",
                device.name,
                {k: v for k, v in held.items() if wanted.get(k) != v} or local,
            )
            handle.link("del", index=link["index"])
        handle.link(
            "add",
            ifname=device.name,
            kind="vxlan",
            vxlan_id=device.vni,
            vxlan_port=device.port,
            vxlan_link=parent_index,
            vxlan_learning=0,
            address=device.mac,
            mtu=mtu,
            **{"vxlan_local" if device.version == 4 else "vxlan_local6": device.local},
        )
        created = self._get_link(handle, device.name)
        if created is None:
            raise OSError(_ENODEV, f"{device.name} vanished as it was made")
        handle.link("set", index=created["index"], state="up")
        # A new device has no entries: whatever we knew of the old one is void.
        if self._neighbours is not None:
            self._neighbours.pop(device.version, None)
        if self._fdb is not None:
            self._fdb.pop(device.version, None)
        return created["index"], True

    @staticmethod
    def _sync_address(handle: Any, device: VxlanDevice, index: int) -> None:
        family = _FAMILY[device.version]
        length = 32 if device.version == 4 else 128
        present = False
        for addr in handle.get_addr(family=family, index=index):
            text, plen = addr.get("IFA_ADDRESS"), addr["prefixlen"]
            if text == device.address and plen == length:
                present = True
            elif addr["scope"] == 0:  # a global address we did not put there
                handle.addr("del", index=index, address=text, prefixlen=plen)
        if not present:
            handle.addr("add", index=index, address=device.address, prefixlen=length)

    def _read_entries(self, handle: Any, version: int, index: int) -> None:
        """What the kernel holds on the device: permanent entries only (ours)."""
        if self._neighbours is None:
            self._neighbours = {}
        if self._fdb is None:
            self._fdb = {}
        name = DEVICE_NAMES[version]
        if version not in self._neighbours:
            self._neighbours[version] = {
                Neighbour(name, n.get("NDA_DST"), n.get("NDA_LLADDR"))
                for n in handle.get_neighbours(ifindex=index, family=_FAMILY[version])
                if n["state"] & _NUD_PERMANENT and n.get("NDA_LLADDR")
            }
        if version not in self._fdb:
            self._fdb[version] = {
                FdbEntry(name, n.get("NDA_LLADDR"), n.get("NDA_DST"))
                for n in handle.get_neighbours(ifindex=index, family=socket.AF_BRIDGE)
                if n["state"] & _NUD_PERMANENT and n.get("NDA_DST") and n.get("NDA_LLADDR")
            }

    def _sync_entries(
        self, handle: Any, version: int, index: int, plan: FamilyPlan, failing: dict[str, str]
    ) -> None:
        """Neighbour and FDB entries to match the plan, all in one batch."""
        self._read_entries(handle, version, index)
        assert self._neighbours is not None and self._fdb is not None
        held_n, held_f = self._neighbours[version], self._fdb[version]
        family = _FAMILY[version]
        work: list[tuple[set[Any], Neighbour | FdbEntry, NeighRequest]] = []
        # Deletions first: a MAC that moved must lose its old entry before
        # the new one lands.
        for command, entries_n, entries_f in (
            ("del", held_n - plan.neighbours, held_f - plan.fdb),
            ("replace", plan.neighbours - held_n, plan.fdb - held_f),
        ):
            for n in sorted(entries_n):
                work.append((held_n, n, NeighRequest(command, family, index, n.mac, n.address)))
            for f in sorted(entries_f):
                request = NeighRequest(
                    command, socket.AF_BRIDGE, index, f.mac, f.remote, flags=_NTF_SELF
                )
                work.append((held_f, f, request))
        results = self._writer([request for _, _, request in work])
        for (held, entry, request), error in zip(work, results, strict=True):
            if error is not None and not (request.command == "del" and error.errno == _ENOENT):
                what = f"{type(entry).__name__.lower()} {entry}"
                failing[what] = f"{request.command}: {error.strerror or error}"
            elif request.command == "del":
                held.discard(entry)
            else:
                held.add(entry)
