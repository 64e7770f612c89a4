"""Command line: ``dataplane-driver`` (Felix mode), ``replay``, ``cleanup``, ``version``.

``dataplane-driver`` is the console script (``python -m dataplane`` and the
repository's ``driver.py`` run the same :func:`main`). Felix starts it with
no arguments, so every option can also come from a ``DATAPLANE_*``
environment variable (:func:`_add_environment`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, NoReturn

import trio

from dataplane import cli_values as values
from dataplane.core.heap import HeapFreezer
from dataplane.core.loop import Dataplane
from dataplane.core.platform import Platform
from dataplane.core.status_files import StatusFileSink
from dataplane.errors import PlatformUnavailableError, ProtocolError
from dataplane.kube.connection import KubeConnectionError, in_cluster, kubeconfig
from dataplane.ops.health import DEFAULT_LIVENESS_DEADLINE
from dataplane.ops.logfmt import LOG_FORMATS, formatter
from dataplane.sim import SimPlatform
from dataplane.wire.framing import DEFAULT_MAX_FRAME_BYTES
from dataplane.wire.releases import Release
from dataplane.wire.transport import (
    FileSource,
    MessageSink,
    PipeSink,
    PipeSource,
    check_pipe_fd,
)

if TYPE_CHECKING:
    from dataplane.linux.platform import LinuxPlatform

__all__ = ["main"]

log = logging.getLogger("dataplane.cli")

FELIX_INPUT_FD = 3
FELIX_OUTPUT_FD = 4

PROG = "dataplane-driver"
ENV_PREFIX = "DATAPLANE_"
FELIX_RELEASES = ("auto", *(release.value for release in Release))  # auto, v3.30, ...

# SIGTERM: Felix SIGKILLs its driver 4 s after it, so the apply in progress
# gets STOP_GRACE seconds to finish, and everything (the last status
# messages to fd 4 included) STOP_DEADLINE seconds, leaving time to exit.
# Both count from when the trio loop sees the signal, which a stretch of
# pure-Python work in an apply (rendering a large node) can delay.
STOP_GRACE = 1.5
STOP_DEADLINE = 1.8
# Past this, a watchdog thread exits the process whatever the loop is doing:
# a stretch of rendering or a netlink call in a worker thread sees no
# cancellation, and Felix's 2 s expectation (and its SIGKILL at 4 s) do not
# wait. As safe as that SIGKILL: every kernel write is atomic on its own
# (an iptables-restore per table, a netlink request), and the next start
# adopts what is programmed.
STOP_HARD_DEADLINE = 1.9

_DESCRIPTION = """\
A Felix-compatible node dataplane driver.

With no command, runs as Calico Felix's external dataplane driver: reads
length-prefixed ToDataplane envelopes from fd 3 and writes FromDataplane
envelopes to fd 4 (Felix opens both pipes). Give Felix the path of
dataplane-driver as DataplaneDriver, with UseInternalDataplaneDriver false.
Logs go to stderr, one event a line, with the message sequence number.
Exits 0 when Felix closes fd 3, and 1 with a one-line error if the stream is
malformed. On SIGTERM (or SIGINT) it lets the apply in progress finish for
up to 1.5 s, logs one line and exits 0, leaving the dataplane as programmed.

Every option can also be set by an environment variable, named after it:
DATAPLANE_ and the option's name upper-cased with dashes as underscores
(--chain-prefix: DATAPLANE_CHAIN_PREFIX); a list (--host-address) is
comma-separated, and an empty variable counts as unset. An option given on
the command line wins over its variable.
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
  DATAPLANE_RECORD=/var/log/calico/driver.log %(prog)s   # under Felix, keep a log
  %(prog)s replay examples/demo-node.log         # what would be programmed
  %(prog)s --platform windows --hns-fake host.json replay examples/demo-node.log
"""


def _version() -> str:
    try:
        return metadata.version("dataplane")
    except metadata.PackageNotFoundError:
        return "unknown"


def _version_line() -> str:
    return f"dataplane {_version()} (Felix felixbackend.proto; platforms: linux, windows, sim)"


def _invoked_as(argv0: str) -> str:
    """The program name to show: the one invoked if it is ours, else dataplane-driver."""
    name = os.path.basename(argv0)
    if name == "__main__.py":
        return "python -m dataplane"
    if name == "driver.py":  # the repository's wrapper script
        return name
    return PROG


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


def _linux_platform(args: argparse.Namespace) -> LinuxPlatform:
    reason = _linux_usable()
    if reason is not None:
        raise PlatformUnavailableError(
            f"cannot program this node: {reason}; use --platform sim to run without a dataplane"
        )
    from pathlib import Path  # noqa: PLC0415

    from dataplane.linux.kernel.sysctl_state import DEFAULT_SYSCTL_STATE  # noqa: PLC0415
    from dataplane.linux.platform import LinuxPlatform  # noqa: PLC0415 - Linux only

    state = Path(args.sysctl_state) if args.sysctl_state else DEFAULT_SYSCTL_STATE
    return LinuxPlatform(
        chain_prefix=args.chain_prefix, sysctl_state=state, nftables_mode=args.nftables_mode
    )


class _Append(argparse.Action):
    """``append``, except that the first use on the command line replaces the
    default (which may come from the environment) instead of adding to it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        items = getattr(namespace, self.dest, None)
        items = [] if items is None or items is self.default else list(items)
        items.append(values)
        setattr(namespace, self.dest, items)


class _BadEnv:
    """An option's default when its environment variable does not parse.

    Reported (one line, exit 2) only if the option is not also given on
    the command line, which would win anyway.
    """

    def __init__(self, message: str) -> None:
        self.message = message


def env_var(action: argparse.Action) -> str:
    """The environment variable of an option: --chain-prefix -> DATAPLANE_CHAIN_PREFIX."""
    long = next(opt for opt in action.option_strings if opt.startswith("--"))
    return ENV_PREFIX + long[2:].upper().replace("-", "_")


def _from_env(action: argparse.Action, text: str) -> object:
    """``text`` converted and checked as argparse would the option's argument."""

    def one(item: str) -> object:
        value: object = item
        if callable(action.type):
            try:
                value = action.type(item)
            except argparse.ArgumentTypeError as exc:
                raise ValueError(str(exc)) from None
            except (TypeError, ValueError):
                raise ValueError(f"{item!r}: not accepted") from None
        if action.choices is not None and value not in action.choices:
            choices = ", ".join(repr(choice) for choice in action.choices)
            raise ValueError(f"invalid choice: {item!r} (choose from {choices})")
        return value

    if isinstance(action, _Append):
        return [one(item.strip()) for item in text.split(",") if item.strip()]
    return one(text)


def _add_environment(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """Let every option also come from its ``DATAPLANE_*`` variable.

    Once for all options: each one's help names its variable, and a variable
    that is set (and not empty) becomes the option's default, so that the
    command line still wins. A value that does not parse becomes a _BadEnv
    default, reported by :func:`_parse_args` if nothing overrides it.
    """
    for action in parser._actions:  # argparse has no public list of them
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        if not action.option_strings:
            continue  # the COMMAND positional
        if not isinstance(action, argparse._StoreAction | _Append):
            raise TypeError(f"{action.option_strings}: no environment variable rule for it")
        name = env_var(action)
        action.help = f"{action.help} [env {name}]"
        text = environ.get(name, "")
        if not text:
            continue
        try:
            action.default = _from_env(action, text)
        except ValueError as exc:
            action.default = _BadEnv(f"environment variable {name}: {exc}")


def _parser(environ: Mapping[str, str] | None = None, prog: str = PROG) -> argparse.ArgumentParser:
    """The parser, with defaults from ``environ`` (``os.environ`` if None)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # A command's --log must not be taken for an abbreviation of --log-level.
        allow_abbrev=False,
    )
    parser.set_defaults(prog=prog)
    parser.add_argument(
        "--version",
        action="version",
        version=_version_line(),
        help="print the version and the platforms available, as the version command",
    )
    parser.add_argument(
        "--log-level",
        default=None,
        **values.enum("DEBUG", "INFO", "WARNING", "ERROR"),
        help="log level (default: INFO, then Felix's LogSeverityScreen)",
    )
    parser.add_argument(
        "--max-frame-bytes",
        type=values.positive_int,
        default=DEFAULT_MAX_FRAME_BYTES,
        metavar="N",
        help="largest accepted frame; a longer length prefix is fatal (default: 64 MiB)",
    )
    parser.add_argument(
        "--platform",
        default="auto",
        **values.enum("auto", "linux", "windows", "sim"),
        help="dataplane to program: linux (iptables, ipsets, routes), windows (HNS ACLs;"
        " with --hns-fake off Windows) or sim (in memory, programs nothing). auto"
        " (default): linux, and a fatal error where it cannot run; for replay, auto means sim",
    )
    parser.add_argument(
        "--hns-fake",
        metavar="FILE",
        help="with --platform windows: program the simulated HNS host kept in FILE (JSON,"
        " rewritten in place at every change, under a file lock: other processes may"
        " change it too) instead of the real Host Network Service",
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
        action=_Append,
        type=values.ip_address,
        default=[],
        metavar="IP",
        help="with --platform windows: an address of this node, always allowed to reach"
        " local pods (kubelet probes); repeatable",
    )
    parser.add_argument(
        "--hns-refresh-rate",
        type=values.rate,
        default=None,
        metavar="CALLS_PER_S",
        help="with --platform windows: at most this many HNS calls a second for the"
        " periodic re-read of endpoints (EndpointRefreshInterval), spread over the interval;"
        " 0: no limit (default: 10)",
    )
    parser.add_argument(
        "--chain-prefix",
        type=values.chain_prefix,
        default="cali-",
        metavar="PREFIX",
        help="prefix of the iptables chains we own (default: cali-, as Felix)",
    )
    parser.add_argument(
        "--nftables-mode",
        default=None,
        **values.enum("disabled", "enabled", "auto"),
        help="with --platform linux: program iptables (disabled), native nftables (enabled)"
        " or nftables where the kernel has it and no iptables chains of ours are present"
        " (auto); overrides Felix's NFTablesMode (default: as NFTablesMode says, else"
        " disabled). Whichever runs removes the other's objects of ours",
    )
    parser.add_argument(
        "--services-source",
        default="felix",
        **values.enum("felix", "kubernetes"),
        help="under Felix: where services and their endpoints come from: felix (ServiceUpdate"
        " and ServiceBackendsUpdate messages; no Felix sends backends) or kubernetes (the"
        " API's Services and EndpointSlices, as kube-proxy; switch kube-proxy off). Default:"
        " felix",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="with --services-source kubernetes: the API server and credentials (default:"
        " the pod's service account, as calico-node's container has it)",
    )
    parser.add_argument(
        "--kubernetes-grace",
        type=values.seconds(),
        default=60.0,
        metavar="S",
        help="with --services-source kubernetes: how long the API may be unreachable (a"
        " list or watch failing) before /readyz fails; the programmed services are kept"
        " meanwhile (default: 60)",
    )
    parser.add_argument(
        "--node-name",
        metavar="NAME",
        help="with --services-source kubernetes: this node's Node name, for endpoint locality"
        " and topology (default: $NODENAME as calico-node sets it, else the host name)",
    )
    parser.add_argument(
        "--endpoint-status-prefix",
        type=values.status_prefix,
        default=None,
        metavar="DIR",
        help="under Felix: write endpoint-status files in DIR/endpoint-status/, as Felix's"
        " reporter would (it never does for an external driver); overrides Felix's"
        " EndpointStatusPathPrefix (default: as that says, else /var/run/calico);"
        " '' writes none",
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
    parser.add_argument(
        "--listen",
        type=values.listen,
        metavar="HOST:PORT",
        help="serve /metrics, /livez, /readyz, /state and /explain over HTTP here; :PORT"
        " binds 127.0.0.1 (default: off; never Felix's 9091/9099 unless asked)",
    )
    parser.add_argument(
        "--liveness-deadline",
        type=values.seconds(zero=False),
        default=DEFAULT_LIVENESS_DEADLINE,
        metavar="SECONDS",
        help="/livez answers 503 once the main loop has been busy this long (default: 60)",
    )
    parser.add_argument(
        "--ready-quarantine-grace",
        type=values.seconds(),
        default=0.0,
        metavar="SECONDS",
        help="/readyz answers 503 once an object has been refused this long (default: 0, at once)",
    )
    parser.add_argument(
        "--policy-counters-interval",
        type=values.seconds(),
        default=30.0,
        metavar="SECONDS",
        help="with --listen on Linux: read the kernel's per-rule counters for"
        " dataplane_policy_packets_total at most this often, while scraped (default: 30;"
        " 0: off, no iptables-save -c at all)",
    )
    parser.add_argument(
        "--log-format",
        default="text",
        **values.enum(*LOG_FORMATS),
        help="log lines as text (default) or one JSON object per line, with the same fields",
    )
    parser.add_argument(
        "--felix-release",
        default="auto",
        **values.enum(*FELIX_RELEASES),
        help="which Felix release's wire format to decode; auto (default) detects it from"
        " what arrives (the override is for the rare ambiguous case)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    replay = commands.add_parser("replay", help="replay a recorded log and print the state")
    replay.add_argument("file", metavar="FILE", help="log file ('-' for stdin)")
    commands.add_parser("version", help="print the version")
    show = commands.add_parser(
        "show",
        help="the desired state, each object with its status (pending, done, error), since"
        " when and its error: from a live driver (--address) or a replayed log (--log)",
    )
    _add_source(show).add_argument(
        "--hns",
        metavar="FILE",
        help="the objects a simulated HNS host holds (the file of --hns-fake FILE)",
    )
    show.add_argument("--json", action="store_true", help="one JSON record per object")
    show.add_argument("--kind", action="append", metavar="KIND", help="only this kind (repeatable)")
    explain = commands.add_parser(
        "explain",
        help="which endpoint, service, tier, policy and rule decide a packet, from a live"
        " driver's state (--address) or a replayed log (--log)",
    )
    _add_source(explain)
    explain.add_argument("--from", dest="src", required=True, metavar="IP")
    explain.add_argument("--to", dest="dst", required=True, metavar="IP")
    explain.add_argument(
        "--proto",
        required=True,
        **values.enum("tcp", "udp", "icmp", "sctp"),
    )
    explain.add_argument(
        "--port", type=values.positive_int, metavar="N", help="destination port (tcp, udp)"
    )
    explain.add_argument("--json", action="store_true", help="the verdict and steps as JSON")
    health = commands.add_parser(
        "health",
        help="probe a driver's /livez (or /readyz with --ready) for an exec probe: exit 0"
        " when it answers 200, else 1",
    )
    health.add_argument("--address", type=values.listen, metavar="HOST:PORT")
    health.add_argument("--ready", action="store_true", help="probe /readyz instead")
    commands.add_parser(
        "cleanup",
        help="remove every chain, rule, IP set, route and sysctl change we own (both"
        " iptables backends) and restore the forwarding sysctls we changed; touches"
        " nothing else",
    )
    _add_environment(parser, os.environ if environ is None else environ)
    return parser


def _add_source(command: argparse.ArgumentParser) -> argparse._MutuallyExclusiveGroup:
    source = command.add_mutually_exclusive_group()
    source.add_argument(
        "--address",
        type=values.listen,
        metavar="HOST:PORT",
        help="a live driver's --listen address (default: DATAPLANE_LISTEN)",
    )
    source.add_argument("--log", metavar="FILE", help="replay this recorded log instead")
    return source


def _parse_args(
    argv: Sequence[str] | None, environ: Mapping[str, str] | None
) -> argparse.Namespace:
    parser = _parser(environ, prog=_invoked_as(sys.argv[0]))
    args = parser.parse_args(argv)
    for value in vars(args).values():
        if isinstance(value, _BadEnv):  # one line, as argparse's usage errors end
            parser.exit(2, f"{parser.prog}: error: {value.message}\n")
    return args


def _setup_logging(level: str | None, log_format: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    logging.basicConfig(level=getattr(logging, level or "INFO"), handlers=[handler])


def _run_felix_mode(args: argparse.Namespace) -> int:
    try:
        check_pipe_fd(FELIX_INPUT_FD, "input from Felix")
        check_pipe_fd(FELIX_OUTPUT_FD, "output to Felix")
    except OSError as exc:
        prog = args.prog
        print(
            f"{prog}: {exc.strerror}. With no command, {prog} runs as Felix's external"
            f" dataplane driver and needs pipes on fds 3 and 4; see '{prog} --help', or"
            f" try '{prog} replay FILE'.",
            file=sys.stderr,
        )
        return 2
    try:
        platform = _platform(args.platform, args)
    except PlatformUnavailableError as exc:
        print(f"{args.prog}: {exc}", file=sys.stderr)
        return 1
    with contextlib.ExitStack() as stack:
        record: BinaryIO | None = None
        if args.record:
            record = stack.enter_context(open(args.record, "ab"))
        source = PipeSource(
            FELIX_INPUT_FD,
            max_frame_bytes=args.max_frame_bytes,
            record_to=record,
            release=args.felix_release,
        )
        try:
            dataplane = _observed_dataplane(platform, args, stack)
        except OSError as exc:
            print(f"{args.prog}: --listen {args.listen}: {exc.strerror}", file=sys.stderr)
            return 1
        sink = _felix_sink(dataplane, args)
        try:
            _services_source(dataplane, args)
        except KubeConnectionError as exc:
            print(f"{args.prog}: --services-source kubernetes: {exc}", file=sys.stderr)
            return 2
        log.info("driver %s starting, platform %s", _version(), dataplane.platform.name)
        try:
            stopped_by = trio.run(_serve, dataplane, source, sink)
        except ProtocolError as exc:
            log.critical("fatal: %s", exc)
            return 1
    if stopped_by is not None:
        _exit_now(_report_stop(dataplane, stopped_by))
    # The pipe reader thread may still be blocked reading fd 3: it is a
    # daemon thread, so the interpreter exits without waiting for it.
    return _report_end(dataplane, "stopped")


def _observed_dataplane(
    platform: Platform, args: argparse.Namespace, stack: contextlib.ExitStack
) -> Dataplane:
    """The loop, watched and served over HTTP if ``--listen`` asks for it.

    Raises:
        OSError: the address cannot be bound.
    """
    follow = args.log_level is None
    # A long-running process: keep full collections off its loop.
    heap = HeapFreezer(trio.current_time)
    if args.listen is None:
        return Dataplane(platform, follow_log_severity=follow, heap=heap)
    from dataplane.ops.explain_cmd import explain_handler  # noqa: PLC0415
    from dataplane.ops.health import Health  # noqa: PLC0415
    from dataplane.ops.observer import Observer  # noqa: PLC0415
    from dataplane.ops.server import OpsServer  # noqa: PLC0415

    health = Health(
        liveness_deadline=args.liveness_deadline, quarantine_grace=args.ready_quarantine_grace
    )
    observer = Observer(
        platform, health=health, policy_counters_interval=args.policy_counters_interval
    )
    server = OpsServer(observer, args.listen, explain=explain_handler(observer))
    stack.callback(server.close)
    server.start()
    log.info(
        "serving /metrics, /livez, /readyz, /state and /explain on http://%s:%d",
        args.listen.host,
        server.port,
    )
    return Dataplane(observer.platform, follow_log_severity=follow, observer=observer, heap=heap)


def _exit_now(code: int) -> NoReturn:
    """Exit at once, without tearing the interpreter down.

    After a stop signal every second counts (Felix's SIGKILL follows 4 s
    after its SIGTERM), and the teardown of a large node's state costs a
    good part of one (0.4 s measured at 5,000 endpoints) for nothing: the
    dataplane stays as programmed by design, the record file is closed,
    and the logs are flushed here.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _services_source(dataplane: Dataplane, args: argparse.Namespace) -> None:
    """With --services-source kubernetes: the API owns this node's services.

    Raises:
        KubeConnectionError: no credentials (not in a pod, a bad kubeconfig).
    """
    if args.services_source != "kubernetes":
        return
    from dataplane.kube.api import ApiClient  # noqa: PLC0415 - only when asked for
    from dataplane.kube.source import KubeServices  # noqa: PLC0415

    connection = kubeconfig(Path(args.kubeconfig)) if args.kubeconfig else in_cluster()
    node = args.node_name or os.environ.get("NODENAME") or socket.gethostname()
    source = KubeServices(
        ApiClient(connection),
        node,
        lambda: dataplane.config.kube_node_port_ranges,
        changed=dataplane.changed,
    )
    dataplane.services.use_source(source)
    dataplane.add_source("the Kubernetes API", source.run, lambda: source.synced)
    from dataplane.ops.observer import Observer  # noqa: PLC0415

    observer = dataplane.observer
    if isinstance(observer, Observer):  # with --listen: /readyz and /metrics
        from dataplane.ops.kube import KubeCollector, kube_readiness  # noqa: PLC0415

        grace = args.kubernetes_grace
        observer.health.add_check(lambda now: kube_readiness(source, grace, now))
        observer.metrics.register(KubeCollector(source))
        observer.platform.services_source = "kubernetes"
        source.arrived = lambda: observer.arrived("kube_service", trio.current_time())
    log.info(
        "services from the Kubernetes API (%s, node %s); Felix's service messages are ignored",
        connection.source,
        node,
    )


def _felix_sink(dataplane: Dataplane, args: argparse.Namespace) -> MessageSink:
    """Felix's fd 4; on Linux (as Felix, which ignores it on Windows) with the status files."""
    pipe = PipeSink(FELIX_OUTPUT_FD)
    if dataplane.platform.name == "windows":
        return pipe
    override: str | None = args.endpoint_status_prefix

    def prefix() -> str:
        if override is not None:
            return override
        return dataplane.config.endpoint_status_path_prefix

    return StatusFileSink(pipe, prefix)


async def _serve(dataplane: Dataplane, source: PipeSource, sink: MessageSink) -> str | None:
    """Run the loop until end of input or a stop signal; the signal's name, if one came."""
    stopped_by: list[str] = []

    async def on_signal(signals: AsyncIterator[int], cancel_scope: trio.CancelScope) -> None:
        async for signum in signals:
            if not stopped_by:  # a second signal changes nothing
                signame = signal.Signals(signum).name
                stopped_by.append(signame)
                _start_watchdog(dataplane, signame)
                dataplane.stop(grace=STOP_GRACE)
                # Also bounds run()'s flush of the last messages to fd 4,
                # which waits forever if Felix no longer reads it.
                cancel_scope.deadline = trio.current_time() + STOP_DEADLINE

    failure: ProtocolError | None = None
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(on_signal, signals, nursery.cancel_scope)
            try:
                await dataplane.run(source, sink)
            except ProtocolError as exc:
                failure = exc
            nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return stopped_by[0] if stopped_by else None


def _start_watchdog(dataplane: Dataplane, signame: str) -> None:
    def expire() -> None:
        log.warning(
            "%s: stopping after %d messages; the loop was still busy after %.1f s, so the apply"
            " in progress was abandoned (each iptables table is all or nothing; the next start"
            " adopts what is programmed); dataplane left as programmed",
            signame,
            dataplane.stats.messages,
            STOP_HARD_DEADLINE,
        )
        _exit_now(0)

    timer = threading.Timer(STOP_HARD_DEADLINE, expire)
    timer.daemon = True
    timer.start()


def _report_stop(dataplane: Dataplane, signame: str) -> int:
    """The one line a stop signal gets; exit 0 whatever the dataplane's state.

    Felix stops its driver this way at every shutdown (and restarts it
    with a fresh snapshot); nothing is cleaned up, so the line says what
    the dataplane is left with.
    """
    count = dataplane.stats.messages
    if dataplane.apply_abandoned:
        log.warning(
            "%s: stopping after %d messages; the apply in progress did not finish within"
            " %.1f s and was abandoned (each iptables table is all or nothing; the next start"
            " adopts what is programmed); dataplane left as programmed",
            signame,
            count,
            STOP_GRACE,
        )
    elif dataplane.last_apply_error is not None:
        log.warning(
            "%s: stopping after %d messages; dataplane left as programmed, which is NOT the"
            " desired state: the last apply failed: %s",
            signame,
            count,
            dataplane.last_apply_error,
        )
    elif not dataplane.in_sync:
        log.info(
            "%s: stopping after %d messages, before InSync; nothing was programmed",
            signame,
            count,
        )
    else:
        log.info("%s: stopping after %d messages; dataplane left as programmed", signame, count)
    return 0


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
        print(f"{args.prog} replay: {exc}", file=sys.stderr)
        return 1
    dataplane = Dataplane(platform, follow_log_severity=args.log_level is None)
    with contextlib.ExitStack() as stack:
        try:
            file: BinaryIO = (
                sys.stdin.buffer if args.file == "-" else stack.enter_context(open(args.file, "rb"))
            )
        except OSError as exc:
            print(f"{args.prog} replay: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
            return 2
        source = FileSource(file, max_frame_bytes=args.max_frame_bytes, release=args.felix_release)
        try:
            trio.run(dataplane.run, source)
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
        print(f"{args.prog} cleanup: {exc}", file=sys.stderr)
        return 1
    trio.run(platform.cleanup)
    log.info(
        "cleanup done: our chains, rules, IP sets, routes and interface sysctls removed,"
        " forwarding sysctls we changed restored"
    )
    return 0


# A shell's status for a process its reader stopped reading (128 + SIGPIPE).
EXIT_READER_GONE = 141


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the command line; the exit code.

    Args:
        argv: the arguments (``sys.argv[1:]`` if None).
        environ: where ``DATAPLANE_*`` variables come from (``os.environ`` if None).
    """
    try:
        return _main(argv, environ)
    except BrokenPipeError:
        # The reader went away (`show --json | head -1`): nothing more to say
        # to it, and no traceback. Python flushes stdout again at exit, so it
        # goes to /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_READER_GONE


def _main(argv: Sequence[str] | None, environ: Mapping[str, str] | None) -> int:
    args = _parse_args(argv, environ)
    if args.command == "version":
        print(_version_line())
        return 0
    operator_command = args.command in {"show", "explain", "health"}
    # Their output is the answer; the replay's INFO lines would bury it.
    _setup_logging(args.log_level or ("WARNING" if operator_command else None), args.log_format)
    if args.command == "replay":
        return _run_replay(args)
    # The operator's commands import rich and the evaluator only when used:
    # the driver's own start stays as fast as it was.
    if args.command == "show":
        from dataplane.ops.commands import run_show  # noqa: PLC0415

        return run_show(args)
    if args.command == "explain":
        from dataplane.ops.explain_cmd import run_explain  # noqa: PLC0415

        return run_explain(args)
    if args.command == "health":
        from dataplane.ops.commands import run_health  # noqa: PLC0415

        return run_health(args)
    if args.command == "cleanup":
        return _run_cleanup(args)
    return _run_felix_mode(args)
