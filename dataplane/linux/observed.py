"""The Linux platform's observability side: its metrics, and the policy
rule counters (:mod:`dataplane.ops.policy_counters`).

A mixin over the state :class:`~dataplane.linux.platform.LinuxPlatform`
sets up: the command runner is wrapped to count the kernel tools, and
after each apply the filter rules' labels are published for the
counters' collector.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from dataplane.linux.counter_reads import counter_reads
from dataplane.linux.kernel.cmd import CommandRunner
from dataplane.linux.metered import LinuxMeter
from dataplane.linux.programmers import Programmers
from dataplane.linux.render.rule_labels import Labelled, RuleLabels, RuleMap

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

    from dataplane.ops.metrics import Metrics

__all__ = ["Observed"]


class Observed:
    """The metrics methods of :class:`~dataplane.linux.platform.LinuxPlatform`."""

    _kernel: Programmers | None
    _runner: CommandRunner
    _netns: str | None
    _meter: LinuxMeter | None
    _labels: RuleLabels | None
    _rule_map: RuleMap
    applying: bool

    def bind_metrics(self, metrics: Metrics) -> None:
        """Count into ``metrics`` from now on; call once, before the first apply.

        The kernel tools are counted by a wrapper around the command runner,
        netlink writes by wrappers around the writers (see
        :mod:`dataplane.linux.metered`); the gauges are set after each apply.
        """
        if self._kernel is not None:
            raise RuntimeError("bind_metrics after the first apply: the programmers exist")
        self._meter = LinuxMeter(metrics)
        self._runner = self._meter.runner(self._runner)

    def policy_counters(
        self,
        *,
        min_interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = 5.0,
        background: bool = True,
    ) -> Collector:
        """A collector of per policy rule counters (:mod:`dataplane.ops.policy_counters`).

        From now on each apply publishes which policy rule each of our
        filter rules was rendered from; the collector reads the kernel's
        counters, ``iptables-save -c`` in the runner's namespace, at most
        every ``min_interval`` seconds (default 30), in a thread of its own
        unless not ``background`` (then in the scrape, for tests).
        """
        from dataplane.ops.policy_counters import (  # noqa: PLC0415 - only if wanted
            DEFAULT_INTERVAL,
            PolicyCounters,
            in_thread,
        )

        if self._labels is None:
            self._labels = RuleLabels()
            if self._kernel is not None:
                self._publish_labels(self._kernel)
        save, parse = counter_reads(lambda: self._kernel, self._netns, timeout)
        return PolicyCounters(
            lambda: self._rule_map,
            save,
            metrics=self._meter.metrics if self._meter else None,
            min_interval=DEFAULT_INTERVAL if min_interval is None else min_interval,
            clock=clock,
            refresh_with=in_thread if background else lambda refresh: refresh(),
            busy=lambda: self.applying,
            parse=parse,
        )

    def _publish_labels(self, kernel: Programmers) -> None:
        assert self._labels is not None
        tables: Mapping[tuple[str, int], Labelled] = kernel.iptables or kernel.views
        filters = {v: table for (name, v), table in tables.items() if name == "filter"}
        self._rule_map = self._labels.update(filters)
