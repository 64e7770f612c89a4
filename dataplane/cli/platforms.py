"""Which platform a command programs: Linux, Windows (HNS) or the in-memory sim."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import TYPE_CHECKING

from dataplane.core.platform import Platform
from dataplane.errors import PlatformUnavailableError
from dataplane.sim import SimPlatform

if TYPE_CHECKING:
    from dataplane.linux.platform import LinuxPlatform

__all__ = ["linux_platform", "platform"]

# capability(7): CAP_NET_ADMIN is bit 12 of the effective set.
_CAP_NET_ADMIN = 1 << 12
_TOOLS = ("iptables-save", "iptables-restore", "ipset", "ip")


def _has_net_admin() -> bool:
    """Whether this process may program the network (CAP_NET_ADMIN in effect)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) & _CAP_NET_ADMIN)
    except (OSError, ValueError):
        pass
    return os.geteuid() == 0


def _linux_usable() -> str | None:
    """Why the Linux platform cannot run here, or None if it can."""
    if sys.platform != "linux":
        return f"not Linux ({sys.platform})"
    if not _has_net_admin():
        return "needs root (CAP_NET_ADMIN) to program iptables, IP sets and routes"
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (packages iptables, ipset, iproute2)"
    return None


def platform(name: str, args: argparse.Namespace) -> Platform:
    """The platform to program: Linux unless another is asked for by name.

    "auto" never falls back to the sim: a driver that programs nothing
    while telling Felix the dataplane is in sync is worse than one that
    stops and says why.
    """
    if name == "sim":
        return SimPlatform()
    if name == "windows":
        return _windows_platform(args)
    return linux_platform(args)


def _windows_platform(args: argparse.Namespace) -> Platform:
    from pathlib import Path  # noqa: PLC0415

    from dataplane.windows.hns.hcn import HCN  # noqa: PLC0415
    from dataplane.windows.hns.hcn_ctypes import HcnBinding  # noqa: PLC0415
    from dataplane.windows.platform import WindowsPlatform  # noqa: PLC0415
    from dataplane.windows.services.lb_state import OwnedIds  # noqa: PLC0415
    from dataplane.windows.sim.simhost import SimHost  # noqa: PLC0415
    from dataplane.windows.view.hns_view import DEFAULT_NETWORK_PATTERN  # noqa: PLC0415

    host: HCN
    if args.hns_fake:
        try:
            host = SimHost.load(Path(args.hns_fake))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise PlatformUnavailableError(
                f"cannot load the HNS host {args.hns_fake}: {exc}"
            ) from None
    elif sys.platform == "win32":
        host = HcnBinding.load()
    else:
        raise PlatformUnavailableError(
            f"--platform windows on {sys.platform} needs --hns-fake FILE, a simulated HNS host"
            " (see README, 'Windows'); the real HNS is reached only on Windows"
        )
    if args.lb_state:
        state = Path(args.lb_state)
    elif args.hns_fake:
        state = Path(f"{args.hns_fake}.load-balancers.json")  # beside the host it describes
    else:
        state = Path(
            os.environ.get("PROGRAMDATA", "C:/ProgramData"), "dataplane", "load-balancers.json"
        )
        state.parent.mkdir(parents=True, exist_ok=True)
    return WindowsPlatform(
        host,
        network_pattern=os.environ.get("KUBE_NETWORK") or DEFAULT_NETWORK_PATTERN,
        host_addresses=tuple(args.host_address),
        owned_load_balancers=OwnedIds(state),
        **({} if args.hns_refresh_rate is None else {"refresh_rate": args.hns_refresh_rate}),
    )


def linux_platform(args: argparse.Namespace) -> LinuxPlatform:
    reason = _linux_usable()
    if reason is not None:
        raise PlatformUnavailableError(
            f"cannot program this node: {reason}; use --platform sim to run without a dataplane"
        )
    from pathlib import Path  # noqa: PLC0415

    from dataplane.linux.kernel.sysctl_state import DEFAULT_SYSCTL_STATE  # noqa: PLC0415
    from dataplane.linux.netlink.mtu_file import DEFAULT_MTU_FILE  # noqa: PLC0415
    from dataplane.linux.platform import LinuxPlatform  # noqa: PLC0415 - Linux only

    state = Path(args.sysctl_state) if args.sysctl_state else DEFAULT_SYSCTL_STATE
    # Not given: Felix's path; "none" (or empty on the command line): none.
    mtu_file = None if args.mtu_file in ("", "none") else Path(args.mtu_file or DEFAULT_MTU_FILE)
    return LinuxPlatform(
        chain_prefix=args.chain_prefix,
        sysctl_state=state,
        mtu_file=mtu_file,
        nftables_mode=args.nftables_mode,
    )
