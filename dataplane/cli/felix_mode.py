"""No command: the driver under Felix, on fds 3 and 4, until Felix goes or a signal."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO, NoReturn

import trio

from dataplane.cli.platforms import platform as choose_platform
from dataplane.cli.version import version
from dataplane.core.heap import HeapFreezer
from dataplane.core.loop import Dataplane
from dataplane.core.platform import Platform
from dataplane.core.status_files import StatusFileSink
from dataplane.errors import PlatformUnavailableError, ProtocolError
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.transport import MessageSink, PipeSink, PipeSource, check_pipe_fd

__all__ = ["report_end", "run"]

log = logging.getLogger("dataplane.cli")

FELIX_INPUT_FD = 3
FELIX_OUTPUT_FD = 4

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


def run(args: argparse.Namespace) -> int:
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
        platform = choose_platform(args.platform, args)
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
        unreachable = _services_source(dataplane, args)
        if unreachable is not None:
            print(f"{args.prog}: --services-source kubernetes: {unreachable}", file=sys.stderr)
            return 2
        log.info("driver %s starting, platform %s", version(), dataplane.platform.name)
        try:
            stopped_by = trio.run(_serve, dataplane, source, sink)
        except ProtocolError as exc:
            log.critical("fatal: %s", exc)
            return 1
    if stopped_by is not None:
        _exit_now(_report_stop(dataplane, stopped_by))
    # The pipe reader thread may still be blocked reading fd 3: it is a
    # daemon thread, so the interpreter exits without waiting for it.
    return report_end(dataplane, "stopped")


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


def _services_source(dataplane: Dataplane, args: argparse.Namespace) -> str | None:
    """With --services-source kubernetes: the API owns this node's services.

    Returns None, or why the API cannot be reached as configured (no
    credentials: not in a pod, a bad kubeconfig).
    """
    if args.services_source != "kubernetes":
        return None
    # Only when asked for: the kubeconfig reader with YAML (12 ms) and the
    # client with its HTTP stack (35 ms) are start time that a node taking
    # services from Felix never needs.
    from dataplane.kube.api import ApiClient  # noqa: PLC0415
    from dataplane.kube.connection import (  # noqa: PLC0415
        KubeConnectionError,
        in_cluster,
        kubeconfig,
    )
    from dataplane.kube.source import KubeServices  # noqa: PLC0415

    try:
        connection = kubeconfig(Path(args.kubeconfig)) if args.kubeconfig else in_cluster()
    except KubeConnectionError as exc:
        return str(exc)
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
    return None


def _felix_sink(dataplane: Dataplane, args: argparse.Namespace) -> MessageSink:
    """Felix's fd 4; on Linux (as Felix, which ignores it on Windows) with the status files."""
    pipe: MessageSink = PipeSink(FELIX_OUTPUT_FD)
    if args.send_in_sync != "yes":
        pipe = _WithoutInSync(pipe)
    if dataplane.platform.name == "windows":
        return pipe
    override: str | None = args.endpoint_status_prefix

    def prefix() -> str:
        if override is not None:
            return override
        return dataplane.config.endpoint_status_path_prefix

    return StatusFileSink(pipe, prefix)


class _WithoutInSync:
    """Felix's fd 4 without DataplaneInSync, which no Felix release takes from a driver.

    ``ext_dataplane.go``'s RecvMessage maps five status payloads and logs
    "Ignoring unknown message from dataplane" for any other, and hands on
    a nil that ``daemon.go`` logs as "Unknown message from dataplane": two
    WARNING lines at every start, in v3.30.7 to master. The status-file
    writer in front of this still sees it (it starts its first full pass).
    """

    def __init__(self, inner: MessageSink) -> None:
        self.inner = inner

    async def send(self, envelope: pb.FromDataplane) -> None:
        if envelope.WhichOneof("payload") != "dataplane_in_sync":
            await self.inner.send(envelope)


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


def report_end(dataplane: Dataplane, verb: str) -> int:
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
