"""Felix's kernel-tool metrics for the Linux platform, counted at the seams.

Nothing here is on the path of a platform without metrics:
:meth:`LinuxPlatform.bind_metrics` puts these in place, before the first
apply, and only then.

* :class:`MeteredRunner` wraps the :class:`~dataplane.linux.kernel.cmd.CommandRunner`
  every programmer runs the kernel's tools through, and knows each tool by
  its name (``iptables-nft-restore``, ``ip6tables-legacy-save``, ``ipset``,
  ...; an ``ip netns exec NS`` prefix is looked through). It counts calls
  and failures of iptables-restore, iptables-save and ipset, and what the
  successful ones executed:

  - ``felix_iptables_lines_executed{ip_version,table}`` (Felix's "rule
    updates"): the lines of a restore that change its table -- rules
    appended, inserted, replaced or deleted (``-A``/``-I``/``-R``/``-D``),
    chains declared (``:name``: created, or flushed if they exist), flushed
    (``-F``) or deleted (``-X``); not the ``*table``/``COMMIT`` framing.
  - ``felix_ipset_lines_executed``: the lines of an ``ipset restore``.

  A restore that fails executed nothing (iptables-restore is atomic;
  of an ipset restore an unknown part), so only successful ones add lines.
  ``--test`` runs (the table asking the kernel's parser which chain it
  refuses) are calls, but a refusal there is the answer asked for, not an
  error, and they execute nothing.
* :meth:`LinuxMeter.netlink_writer` and :meth:`LinuxMeter.netlink` count
  route, neighbour and FDB requests, and VXLAN link and address writes
  (``dataplane_route_writes``).
* :meth:`LinuxMeter.observe` runs after each apply: the gauges of what our
  programmers hold, and the sysctl writes since the last apply.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import CommandResult, CommandRunner
from dataplane.linux.kernel.fed import Fed, feeding, gathered
from dataplane.linux.netlink.batch import NetlinkWriter, Request

if TYPE_CHECKING:  # a platform without metrics never loads prometheus_client
    from prometheus_client import Counter

    from dataplane.ops.metrics import Metrics

__all__ = ["LinuxMeter", "MeteredRunner", "restore_lines", "tool_of"]

_IPTABLES = re.compile(r"(ip6?)tables(?:-legacy|-nft)?-(save|restore)")
_TABLE = re.compile(rb"^\*(\S+)", re.MULTILINE)
# Each starts a line that changes the table (counted with bytes.count: a
# big load's restore has hundreds of thousands of lines).
_CHANGES = (b"\n-A ", b"\n-I ", b"\n-R ", b"\n-D ", b"\n-F ", b"\n-X ", b"\n:")
_NETNS_EXEC = ["ip", "netns", "exec"]


def tool_of(argv: Sequence[str]) -> tuple[str, int]:
    """("restore" | "save" | "ipset" | "", IP version) of a command line."""
    if list(argv[:3]) == _NETNS_EXEC:
        argv = argv[4:]
    if not argv:
        return "", 0
    name = os.path.basename(argv[0])
    if name == "ipset":
        return "ipset", 0
    found = _IPTABLES.fullmatch(name)
    if found is None:
        return "", 0
    return found.group(2), 6 if found.group(1) == "ip6" else 4


def restore_lines(script: bytes) -> dict[str, int]:
    """Lines of an iptables-restore input that change each table (see the header)."""
    headers = list(_TABLE.finditer(script))
    out: dict[str, int] = {}
    for i, header in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(script)
        count = sum(script.count(change, header.end(), end) for change in _CHANGES)
        name = header.group(1).decode(errors="replace")
        out[name] = out.get(name, 0) + count
    return out


class Sized(Protocol):
    """One table's size on either backend: an iptables ``Table`` or a view
    of our nftables table."""

    rule_count: int

    def chain_count(self) -> int: ...


class MeteredRunner:
    """A :class:`CommandRunner` that counts the kernel tools it runs."""

    def __init__(self, inner: CommandRunner, metrics: Metrics) -> None:
        self._inner = inner
        self._metrics = metrics
        m = metrics
        self._counters: dict[str, tuple[Counter, Counter]] = {
            "restore": (m.restore_calls, m.restore_errors),
            "save": (m.save_calls, m.save_errors),
            "ipset": (m.ipset_calls, m.ipset_errors),
        }

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        kind, version = tool_of(argv)
        if not kind:
            return await self._inner.run(argv, stdin=stdin, check=check)
        probe = kind == "restore" and "--test" in argv
        calls, errors = self._counters[kind]
        calls.inc()
        try:
            result = await self._inner.run(argv, stdin=stdin, check=check)
        except ProgrammingError:
            if not probe:
                errors.inc()
            raise
        if result.returncode != 0:
            if not probe:
                errors.inc()
        elif stdin and kind == "restore" and not probe:
            for table, count in restore_lines(stdin).items():
                self._metrics.lines_executed.labels(str(version), table).inc(count)
        elif stdin and kind == "ipset":
            # One operation a line; the scripts have no blank lines.
            self._metrics.ipset_lines.inc(stdin.count(b"\n") + (not stdin.endswith(b"\n")))
        return result

    def feeding(self, argv: Sequence[str]) -> AbstractAsyncContextManager[Fed]:
        """A tool counted here runs gathered, through :meth:`run`; any other
        (``nft``) is fed as the runner wrapped feeds it."""
        if tool_of(argv)[0]:
            return gathered(self, argv)
        return feeding(self._inner, argv)


class _CountingHandle:
    """A pyroute2 handle whose link and address writes are counted."""

    _WRITES = frozenset({"add", "set", "del", "replace", "change"})

    def __init__(self, inner: Any, counter: Counter) -> None:
        self._inner = inner
        self._counter = counter

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def link(self, command: str, *args: Any, **kwargs: Any) -> Any:
        if command in self._WRITES:
            self._counter.inc()
        return self._inner.link(command, *args, **kwargs)

    def addr(self, command: str, *args: Any, **kwargs: Any) -> Any:
        if command in self._WRITES:
            self._counter.inc()
        return self._inner.addr(command, *args, **kwargs)


class LinuxMeter:
    """What the Linux platform counts into, bound to one :class:`Metrics`."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._sysctl_writes = 0

    def runner(self, inner: CommandRunner) -> MeteredRunner:
        return MeteredRunner(inner, self.metrics)

    def netlink_writer(self, inner: NetlinkWriter) -> NetlinkWriter:
        """Route, neighbour and FDB requests, each counted as one write."""
        counter = self.metrics.route_writes

        def write(requests: Sequence[Request]) -> list[OSError | None]:
            counter.inc(len(requests))
            return inner(requests)

        return write

    def netlink(self, factory: Callable[[], Any]) -> Callable[[], Any]:
        """Handles whose link and address writes are counted (the VXLAN device's)."""
        counter = self.metrics.route_writes
        return lambda: _CountingHandle(factory(), counter)

    def observe(
        self,
        tables: Mapping[tuple[str, int], Sized],
        ipsets: Mapping[int, int],
        sysctl_writes: int,
    ) -> None:
        """After an apply: our chains and rules per table, our IP sets per
        version, and the sysctl writes (a running total) since the last call."""
        m = self.metrics
        for (name, version), table in tables.items():
            m.chains.labels(str(version), name).set(table.chain_count())
            m.rules.labels(str(version), name).set(table.rule_count)
        for version, count in ipsets.items():
            m.ipsets_calico.labels(str(version)).set(count)
        m.sysctl_writes.inc(max(0, sysctl_writes - self._sysctl_writes))
        self._sysctl_writes = sysctl_writes
