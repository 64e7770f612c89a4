"""HNS calls for the metrics: counted by HCN function, with latency and failures.

Every HNS call the Windows platform makes goes through one seam,
:meth:`WindowsPlatform._call <dataplane.windows.platform.WindowsPlatform>`,
with a bound method of the :class:`~dataplane.windows.hns.hcn.HCN` protocol, so
the real binding and the simulated host are measured alike. A method is one
logical HNS operation: a modify is an open, the modify and a close; a
listing an enumerate and an open, a query and a close per object. Calls
are counted per HCN function, from what the HCN itself counted during the
operation (:attr:`HCN.calls <dataplane.windows.hns.hcn.HCN.calls>`; the
platform makes one operation at a time, so the difference is this
operation's). Latency and failures are per operation, named by the
function that does its work (``ModifyEndpoint``, ``EnumerateEndpoints``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from dataplane.windows.hns.hcn import EndpointRead, HcnError

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
    "enumerate_endpoints": "EnumerateEndpoints",
    "read_endpoint": "QueryEndpointProperties",
    "enumerate_load_balancers": "EnumerateLoadBalancers",
    "get_load_balancer": "QueryLoadBalancerProperties",
    "modify_network": "ModifyNetwork",
    "create_endpoint": "CreateEndpoint",
    "create_endpoints": "CreateEndpoint",
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
        calls: the HCN's own count of its calls by function.
        timer: seconds, read in the worker thread around each call.
    """

    def __init__(
        self,
        metrics: Metrics,
        calls: Callable[[], Counter[str]],
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._metrics = metrics
        self._calls = calls
        self._timer = timer

    def wrap(self, method: Callable[..., T], call: Callable[[], T]) -> Callable[[], T]:
        """``call`` (``method`` applied to its arguments), measured; as is if no HNS call."""
        function = FUNCTIONS.get(getattr(method, "__name__", ""))
        if function is None:
            return call
        m = self._metrics
        errors, latency = m.hns_errors.labels(function), m.hns_latency.labels(function)
        timer, counted = self._timer, self._calls

        def measured() -> T:
            before = Counter(counted())
            start = timer()
            try:
                result = call()
            except Exception:  # counted whatever it is, and raised as it was
                errors.inc()
                raise
            finally:
                latency.observe(timer() - start)
                for name, n in (Counter(counted()) - before).items():
                    m.hns_calls.labels(name).inc(n)
            # Failures inside an operation that did not fail as a whole: a write
            # through a read's handle, one create of a batch.
            if isinstance(result, EndpointRead) and result.error is not None:
                m.hns_errors.labels(result.error.call).inc()
            if isinstance(result, list):
                for item in result:
                    if isinstance(item, HcnError):
                        m.hns_errors.labels(item.call).inc()
            return result

        return measured
