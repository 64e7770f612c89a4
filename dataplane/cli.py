"""Command line: ``driver.py`` (Felix mode), ``replay``, ``version``."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import TYPE_CHECKING, BinaryIO

import trio

from dataplane.core.loop import Dataplane
from dataplane.core.platform import Platform
from dataplane.errors import PlatformUnavailableError, ProtocolError
from dataplane.sim import SimPlatform
from dataplane.wire.framing import DEFAULT_MAX_FRAME_BYTES
from dataplane.wire.transport import FileSource, PipeSink, PipeSource, check_pipe_fd

if TYPE_CHECKING:
    from dataplane.linux.platform import LinuxPlatform

__all__ = ["main"]

log = logging.getLogger("dataplane.cli")

FELIX_INPUT_FD = 3
FELIX_OUTPUT_FD = 4

_DESCRIPTION = """\
A Felix-compatible node dataplane driver.

With no command, runs as Calico Felix's external dataplane driver: reads
length-prefixed ToDataplane envelopes from fd 3 and writes FromDataplane
envelopes to fd 4 (Felix opens both pipes). Logs go to stderr, one event a
line, with the message sequence number. Exits 0 when Felix closes fd 3,
and 1 with a one-line error if the stream is malformed.
"""

_EPILOG = """\
commands:
  replay FILE   run a recorded log (the fd 3 byte stream, e.g. from --record)
                through the same loop and print the resulting dataplane state;
                in memory unless --platform linux (or windows) is given explicitly
  cleanup       remove everything the Linux platform programmed (chains, hook
                rules, IP sets, routes, interface sysctls) and put global
                forwarding back as the driver found it (--sysctl-state), nothing else
  version       print the version and the platforms available

examples:
  driver.py --record /var/log/calico/driver.log   # under Felix, keep a log
  driver.py replay examples/demo-node.log         # what would be programmed
  driver.py --platform windows --hns-fake host.json replay examples/demo-node.log
"""


def _version() -> str:
    try:
        return metadata.version("dataplane")
    except metadata.PackageNotFoundError:
        return "unknown"


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


def _platform(name: str, args: argparse.Namespace) -> Platform:
    """The platform to program: Linux unless another is asked for by name.

    "auto" never falls back to the sim: a driver that programs nothing
    while telling Felix the dataplane is in sync is worse than one that
    stops and says why.
    """
    if name == "sim":
        return SimPlatform()
    if name == "windows":
        return _windows_platform(args)
    return _linux_platform(args)


def _windows_platform(args: argparse.Namespace) -> Platform:
    from pathlib import Path  # noqa: PLC0415

    from dataplane.windows.hcn import HCN  # noqa: PLC0415
    from dataplane.windows.hcn_ctypes import HcnBinding  # noqa: PLC0415
    from dataplane.windows.hns_view import DEFAULT_NETWORK_PATTERN  # noqa: PLC0415
    from dataplane.windows.lb_state import OwnedIds  # noqa: PLC0415
    from dataplane.windows.platform import WindowsPlatform  # noqa: PLC0415
    from dataplane.windows.simhost import SimHost  # noqa: PLC0415

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
    )


def _linux_platform(args: argparse.Namespace) -> LinuxPlatform:
    reason = _linux_usable()
    if reason is not None:
        raise PlatformUnavailableError(
            f"cannot program this node: {reason}; use --platform sim to run without a dataplane"
        )
    from pathlib import Path  # noqa: PLC0415

    from dataplane.linux.platform import LinuxPlatform  # noqa: PLC0415 - Linux only
    from dataplane.linux.sysctl_state import DEFAULT_SYSCTL_STATE  # noqa: PLC0415

    state = Path(args.sysctl_state) if args.sysctl_state else DEFAULT_SYSCTL_STATE
    return LinuxPlatform(chain_prefix=args.chain_prefix, sysctl_state=state)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="driver.py",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--log-level",
        default=None,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level (default: INFO, then Felix's LogSeverityScreen)",
    )
    parser.add_argument(
        "--max-frame-bytes",
        type=int,
        default=DEFAULT_MAX_FRAME_BYTES,
        metavar="N",
        help="largest accepted frame; a longer length prefix is fatal (default: 64 MiB)",
    )
    parser.add_argument(
        "--platform",
        default="auto",
        choices=["auto", "linux", "windows", "sim"],
        help="dataplane to program: linux (iptables, ipsets, routes), windows (HNS ACLs;"
        " with --hns-fake off Windows) or sim (in memory, programs nothing). auto"
        " (default): linux, and a fatal error where it cannot run; for replay, auto means sim",
    )
    parser.add_argument(
        "--hns-fake",
        metavar="FILE",
        help="with --platform windows: program the simulated HNS host kept in FILE (JSON,"
        " rewritten after every apply) instead of the real Host Network Service",
    )
    parser.add_argument(
        "--lb-state",
        metavar="FILE",
        help="with --platform windows: where the ids of the HNS load balancers this driver"
        " created are kept (HNS cannot tag them); default FILE.load-balancers.json beside"
        " --hns-fake FILE, else %%ProgramData%%/dataplane/load-balancers.json",
    )
    parser.add_argument(
        "--host-address",
        action="append",
        default=[],
        metavar="IP",
        help="with --platform windows: an address of this node, always allowed to reach"
        " local pods (kubelet probes); repeatable",
    )
    parser.add_argument(
        "--chain-prefix",
        default="cali-",
        metavar="PREFIX",
        help="prefix of the iptables chains we own (default: cali-, as Felix)",
    )
    parser.add_argument(
        "--sysctl-state",
        metavar="FILE",
        help="with --platform linux: where the values of the global forwarding sysctls"
        " found before the driver turned them on are kept, for cleanup to restore"
        " (default: /var/lib/dataplane/sysctls.json)",
    )
    parser.add_argument(
        "--record",
        metavar="FILE",
        help="append every byte received on fd 3 to FILE (a replayable log)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    replay = commands.add_parser("replay", help="replay a recorded log and print the state")
    replay.add_argument("file", metavar="FILE", help="log file ('-' for stdin)")
    commands.add_parser("version", help="print the version")
    commands.add_parser(
        "cleanup",
        help="remove every chain, rule, IP set, route and sysctl change we own (both"
        " iptables backends) and restore the forwarding sysctls we changed; touches"
        " nothing else",
    )
    return parser


def _setup_logging(level: str | None) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, level or "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _run_felix_mode(args: argparse.Namespace) -> int:
    try:
        check_pipe_fd(FELIX_INPUT_FD, "input from Felix")
        check_pipe_fd(FELIX_OUTPUT_FD, "output to Felix")
    except OSError as exc:
        print(
            f"driver.py: {exc.strerror}. With no command, driver.py runs as Felix's external"
            " dataplane driver and needs pipes on fds 3 and 4; see 'driver.py --help', or"
            " try 'driver.py replay FILE'.",
            file=sys.stderr,
        )
        return 2
    try:
        platform = _platform(args.platform, args)
    except PlatformUnavailableError as exc:
        print(f"driver.py: {exc}", file=sys.stderr)
        return 1
    with contextlib.ExitStack() as stack:
        record: BinaryIO | None = None
        if args.record:
            record = stack.enter_context(open(args.record, "ab"))
        source = PipeSource(FELIX_INPUT_FD, max_frame_bytes=args.max_frame_bytes, record_to=record)
        sink = PipeSink(FELIX_OUTPUT_FD)
        dataplane = Dataplane(platform, follow_log_severity=args.log_level is None)
        log.info("driver %s starting, platform %s", _version(), dataplane.platform.name)
        try:
            trio.run(dataplane.run, source, sink)
        except ProtocolError as exc:
            log.critical("fatal: %s", exc)
            return 1
    return _report_end(dataplane, "stopped")


def _report_end(dataplane: Dataplane, verb: str) -> int:
    """Say how the run ended, never claiming more than happened; the exit code."""
    count = dataplane.stats.messages
    if dataplane.last_apply_error is not None:
        log.error(
            "%s after %d messages with the dataplane NOT programmed: the last apply failed: %s",
            verb,
            count,
            dataplane.last_apply_error,
        )
        return 1
    if not dataplane.in_sync:
        log.warning("%s after %d messages before InSync: nothing was programmed", verb, count)
        return 0 if verb == "stopped" else 1
    log.info("%s cleanly (%d messages); the dataplane is programmed", verb, count)
    return 0


def _run_replay(args: argparse.Namespace) -> int:
    # Replaying is for looking: it programs a kernel only when asked to
    # explicitly (--platform linux), never by "auto".
    try:
        platform = _platform("sim" if args.platform == "auto" else args.platform, args)
    except PlatformUnavailableError as exc:
        print(f"driver.py replay: {exc}", file=sys.stderr)
        return 1
    dataplane = Dataplane(platform, follow_log_severity=args.log_level is None)
    with contextlib.ExitStack() as stack:
        try:
            file: BinaryIO = (
                sys.stdin.buffer if args.file == "-" else stack.enter_context(open(args.file, "rb"))
            )
        except OSError as exc:
            print(f"driver.py replay: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
            return 2
        try:
            trio.run(dataplane.run, FileSource(file, max_frame_bytes=args.max_frame_bytes))
        except ProtocolError as exc:
            log.critical("fatal: %s", exc)
            return 1
    outputs = dataplane.drain_output()
    kinds = sorted({str(env.WhichOneof("payload")) for env in outputs})
    stats = dataplane.stats
    print(
        f"# replayed {stats.messages} messages ({stats.rejected} rejected), {stats.applies}"
        f" apply(ies); in sync: {'yes' if dataplane.in_sync else 'no'};"
        f" sent {len(outputs)} message(s): {', '.join(kinds) or 'none'}"
    )
    sys.stdout.write(platform.dump())
    # A replay that did not end programmed is a failure a script must see.
    return _report_end(dataplane, "replay ended")


def _run_cleanup(args: argparse.Namespace) -> int:
    try:
        platform = _linux_platform(args)
    except PlatformUnavailableError as exc:
        print(f"driver.py cleanup: {exc}", file=sys.stderr)
        return 1
    trio.run(platform.cleanup)
    log.info(
        "cleanup done: our chains, rules, IP sets, routes and interface sysctls removed,"
        " forwarding sysctls we changed restored"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "version":
        print(f"dataplane {_version()} (Felix felixbackend.proto; platforms: linux, windows, sim)")
        return 0
    _setup_logging(args.log_level)
    if args.command == "replay":
        return _run_replay(args)
    if args.command == "cleanup":
        return _run_cleanup(args)
    return _run_felix_mode(args)
