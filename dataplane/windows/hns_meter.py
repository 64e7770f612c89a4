"""HNS calls for the metrics: counted by HCN function, with latency and failures.

Every HNS call the Windows platform makes goes through one seam,
:meth:`WindowsPlatform._call <dataplane.windows.platform.WindowsPlatform>`,
with a bound method of the :class:`~dataplane.windows.hcn.HCN` protocol, so
the real binding and the simulated host are measured alike. A method is one
logical HNS operation and is named by the HCN function that performs it, as
:attr:`HCN.calls <dataplane.windows.hcn.HCN.calls>` names them (the real
binding's open, query and close around it are part of its latency).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from dataplane.ops.metrics import Metrics

__all__ = ["FUNCTIONS", "HnsMeter"]

T = TypeVar("T")

# HCN method -> the HCN function it performs. ``flush`` and ``calls`` are not
# calls to HNS.
FUNCTIONS = {
    "version": "HNSCall",
    "list_networks": "EnumerateNetworks",
    "list_endpoints": "EnumerateEndpoints",
    "list_load_balancers": "EnumerateLoadBalancers",
    "modify_network": "ModifyNetwork",
    "create_endpoint": "CreateEndpoint",
    "modify_endpoint": "ModifyEndpoint",
    "delete_endpoint": "DeleteEndpoint",
    "create_load_balancer": "CreateLoadBalancer",
    "modify_load_balancer": "ModifyLoadBalancer",
    "delete_load_balancer": "DeleteLoadBalancer",
}


class HnsMeter:
    """Wraps blocking HCN calls so that each is counted and timed.

    Args:
        metrics: ``dataplane_hns_calls``, ``_call_errors`` and
            ``_call_duration_seconds`` are counted there, by function.
        timer: seconds, read in the worker thread around each call.
    """

    def __init__(self, metrics: Metrics, timer: Callable[[], float] = time.perf_counter) -> None:
        self._metrics = metrics
        self._timer = timer

    def wrap(self, method: Callable[..., T], call: Callable[[], T]) -> Callable[[], T]:
        """``call`` (``method`` applied to its arguments), measured; as is if no HNS call."""
        function = FUNCTIONS.get(getattr(method, "__name__", ""))
        if function is None:
            return call
        m = self._metrics
        calls, errors = m.hns_calls.labels(function), m.hns_errors.labels(function)
        latency = m.hns_latency.labels(function)
        timer = self._timer

        def measured() -> T:
            start = timer()
            try:
                return call()
            except Exception:  # counted whatever it is, and raised as it was
                errors.inc()
                raise
            finally:
                calls.inc()
                latency.observe(timer() - start)

        return measured
