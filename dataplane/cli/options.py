"""The global options: one table, read from the command line and the environment.

Felix starts the driver with no arguments, so every global option can also
come from ``DATAPLANE_`` and its name (``--chain-prefix``:
``DATAPLANE_CHAIN_PREFIX``); the command line wins, and an empty variable
counts as unset. Each option is one :class:`Option` row: its value reader
(:mod:`dataplane.cli.values`), default and help. The parser is built from
the table — the options are accepted before the command and after it —
and so are the environment defaults, ``--help``'s variable names and the
configuration reference (``docs/configuration.md``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dataplane.cli import values
from dataplane.ops.health import DEFAULT_LIVENESS_DEADLINE
from dataplane.ops.logfmt import LOG_FORMATS
from dataplane.wire.framing import DEFAULT_MAX_FRAME_BYTES
from dataplane.wire.releases import Release

__all__ = ["ENV_PREFIX", "FELIX_RELEASES", "GLOBAL_OPTIONS", "BadEnv", "Option", "add_options"]

ENV_PREFIX = "DATAPLANE_"
FELIX_RELEASES = ("auto", *(release.value for release in Release))  # auto, v3.30, ...


@dataclass(frozen=True)
class Option:
    """One global option: ``--flag VALUE``, also ``DATAPLANE_FLAG``."""

    flag: str  # --chain-prefix
    help: str
    read: Callable[[str], Any] | None = None  # None: the text as it is
    default: Any = None
    choices: Sequence[str] | None = None  # for --help; ``read`` checks them
    metavar: str | None = None
    repeat: bool = False  # given again adds a value; the variable is comma-separated

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.flag[2:].upper().replace("-", "_")

    def from_env(self, text: str) -> Any:
        """The variable's text as the option's value.

        Raises:
            ValueError: it does not parse; the message quotes it and says
                what is accepted.
        """

        def one(item: str) -> Any:
            if self.read is None:
                return item
            try:
                return self.read(item)
            except argparse.ArgumentTypeError as exc:
                raise ValueError(str(exc)) from None

        if self.repeat:
            return [one(item.strip()) for item in text.split(",") if item.strip()]
        return one(text)


def _enum(*choices: str) -> dict[str, Any]:
    return {"read": values.one_of(*choices), "choices": choices}


GLOBAL_OPTIONS: tuple[Option, ...] = (
    Option(
        "--log-level",
        "log level, in any case (default: INFO, then Felix's LogSeverityScreen)",
        **_enum("DEBUG", "INFO", "WARNING", "ERROR"),
    ),
    Option(
        "--max-frame-bytes",
        "largest accepted frame; a longer length prefix is fatal (default: 64 MiB)",
        values.positive_int,
        DEFAULT_MAX_FRAME_BYTES,
        metavar="N",
    ),
    Option(
        "--platform",
        "dataplane to program: linux (iptables, ipsets, routes), windows (HNS ACLs; with"
        " --hns-fake off Windows) or sim (in memory, programs nothing). auto (default):"
        " linux, and a fatal error where it cannot run; for replay, auto means sim",
        default="auto",
        **_enum("auto", "linux", "windows", "sim"),
    ),
    Option(
        "--hns-fake",
        "with --platform windows: program the simulated HNS host kept in FILE (JSON,"
        " rewritten in place at every change, under a file lock: other processes may"
        " change it too) instead of the real Host Network Service",
        metavar="FILE",
    ),
    Option(
        "--lb-state",
        "with --platform windows: where the ids of the HNS load balancers this driver"
        " created are kept (HNS cannot tag them); default FILE.load-balancers.json beside"
        " --hns-fake FILE, else %%ProgramData%%/dataplane/load-balancers.json",
        metavar="FILE",
    ),
    Option(
        "--host-address",
        "with --platform windows: an address of this node, always allowed to reach local"
        " pods (kubelet probes); repeatable",
        values.ip_address,
        default=(),
        metavar="IP",
        repeat=True,
    ),
    Option(
        "--hns-refresh-rate",
        "with --platform windows: at most this many HNS calls a second for the periodic"
        " re-read of endpoints (EndpointRefreshInterval), spread over the interval; 0: no"
        " limit (default: 100, 1,000 endpoints in 30 s)",
        values.rate,
        metavar="CALLS_PER_S",
    ),
    Option(
        "--chain-prefix",
        "prefix of the iptables chains and nftables tables we own (default: cali-, as Felix)",
        values.chain_prefix,
        "cali-",
        metavar="PREFIX",
    ),
    Option(
        "--nftables-mode",
        "with --platform linux: program iptables (disabled), native nftables (enabled) or"
        " nftables where the kernel has it and no iptables chains of ours are present"
        " (auto); overrides Felix's NFTablesMode (default: as NFTablesMode says, else"
        " disabled). Whichever runs removes the other's objects of ours",
        **_enum("disabled", "enabled", "auto"),
    ),
    Option(
        "--send-in-sync",
        "under Felix: also send DataplaneInSync on fd 4 once the node is programmed from a"
        " complete snapshot (yes), for a parent of your own that reads it. Every Felix"
        " release drops it from an external driver and logs two warnings, so the default"
        " is no; the endpoint-status files are written either way",
        default="no",
        **_enum("no", "yes"),
    ),
    Option(
        "--services-source",
        "under Felix: where services and their endpoints come from: felix (ServiceUpdate"
        " and ServiceBackendsUpdate messages; no Felix sends backends) or kubernetes (the"
        " API's Services and EndpointSlices, as kube-proxy; switch kube-proxy off)."
        " Default: felix",
        default="felix",
        **_enum("felix", "kubernetes"),
    ),
    Option(
        "--kubeconfig",
        "with --services-source kubernetes: the API server and credentials (default: the"
        " pod's service account, as calico-node's container has it)",
        metavar="FILE",
    ),
    Option(
        "--kubernetes-grace",
        "with --services-source kubernetes: how long the API may be unreachable (a list or"
        " watch failing) before /readyz fails; the programmed services are kept meanwhile"
        " (default: 60)",
        values.seconds(),
        60.0,
        metavar="S",
    ),
    Option(
        "--node-name",
        "with --services-source kubernetes: this node's Node name, for endpoint locality"
        " and topology (default: $NODENAME as calico-node sets it, else the host name)",
        metavar="NAME",
    ),
    Option(
        "--endpoint-status-prefix",
        "under Felix: write endpoint-status files in DIR/endpoint-status/, as Felix's"
        " reporter would (it never does for an external driver); overrides Felix's"
        " EndpointStatusPathPrefix (default: as that says, else /var/run/calico); ''"
        " writes none",
        values.status_prefix,
        metavar="DIR",
    ),
    Option(
        "--sysctl-state",
        "with --platform linux: where the values of the global forwarding sysctls found"
        " before the driver turned them on are kept, per network namespace, for cleanup"
        " to restore (default: /var/lib/dataplane/sysctls.json)",
        metavar="FILE",
    ),
    Option(
        "--mtu-file",
        "with --platform linux: where the pod MTU goes for the Calico CNI plugin, as Felix's"
        " own dataplane writes it (from MTUIfacePattern and the overlay); 'none' writes none"
        " (default: /var/lib/calico/mtu)",
        metavar="FILE",
    ),
    Option(
        "--record",
        "append every byte received on fd 3 to FILE (a replayable log)",
        metavar="FILE",
    ),
    Option(
        "--listen",
        "serve /metrics, /livez, /readyz, /state and /explain over HTTP here; :PORT binds"
        " 127.0.0.1 (default: off; never Felix's 9091/9099 unless asked)",
        values.listen,
        metavar="HOST:PORT",
    ),
    Option(
        "--liveness-deadline",
        "/livez answers 503 once the main loop has been busy this long (default: 60)",
        values.seconds(zero=False),
        DEFAULT_LIVENESS_DEADLINE,
        metavar="SECONDS",
    ),
    Option(
        "--ready-quarantine-grace",
        "/readyz answers 503 once an object has been refused this long (default: 0, at once)",
        values.seconds(),
        0.0,
        metavar="SECONDS",
    ),
    Option(
        "--policy-counters-interval",
        "with --listen on Linux: read the kernel's per-rule counters for"
        " dataplane_policy_packets_total at most this often, while scraped (default: 30;"
        " 0: off, no iptables-save -c at all)",
        values.seconds(),
        30.0,
        metavar="SECONDS",
    ),
    Option(
        "--log-format",
        "log lines as text (default) or one JSON object per line, with the same fields",
        default="text",
        **_enum(*LOG_FORMATS),
    ),
    Option(
        "--felix-release",
        "which Felix release's wire format to decode; auto (default) detects it from what"
        " arrives (the override is for the rare ambiguous case)",
        default="auto",
        **_enum(*FELIX_RELEASES),
    ),
)


class BadEnv:
    """An option's default when its environment variable does not parse.

    Reported (one line, exit 2) only if the option is not also given on
    the command line, which would win anyway.
    """

    def __init__(self, message: str) -> None:
        self.message = message


class _Repeat(argparse.Action):
    """``append``, except that the first use on the command line replaces the
    default (which may come from the environment) instead of adding to it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        value: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        items = getattr(namespace, self.dest, None)
        items = [] if items is None or items is self.default else list(items)
        items.append(value)
        setattr(namespace, self.dest, items)


def add_options(
    parser: argparse.ArgumentParser, environ: Mapping[str, str] | None, *, title: str = ""
) -> None:
    """Add every global option to ``parser``.

    With ``environ`` (the main parser), defaults come from the variables;
    without (a command's parser), an option takes effect only when given
    there, after the command, and the main parser's value stands otherwise.
    """
    group = parser.add_argument_group(title) if title else parser
    for option in GLOBAL_OPTIONS:
        default: Any = argparse.SUPPRESS
        if environ is not None:
            default = option.default
            text = environ.get(option.env, "")
            if text:
                try:
                    default = option.from_env(text)
                except ValueError as exc:
                    default = BadEnv(f"environment variable {option.env}: {exc}")
        kwargs: dict[str, Any] = {
            "dest": option.dest,
            "default": default,
            "metavar": option.metavar,
            "help": f"{option.help} [env {option.env}]",
        }
        if option.read is not None:
            kwargs["type"] = option.read
        if option.choices is not None:
            kwargs["choices"] = list(option.choices)
        if option.repeat:
            kwargs["action"] = _Repeat
        group.add_argument(option.flag, **kwargs)
