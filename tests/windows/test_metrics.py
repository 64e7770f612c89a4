"""Every HNS call counted by HCN function, with its latency and failures."""

from __future__ import annotations

import inspect
import itertools
from collections import Counter

from dataplane.ops.metrics import Metrics
from dataplane.windows.hns.hcn import HCN
from dataplane.windows.hns.hns_meter import FUNCTIONS
from dataplane.windows.sim.simhost import SimHost
from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.hns import calico_host
from tests.conftest import run_trio
from tests.kernel import scenario as sc
from tests.linux.metric_samples import samples
from tests.windows.windows_node import messages, node, send


def test_every_hcn_operation_has_its_function_name() -> None:
    methods = {
        name for name, _ in inspect.getmembers(HCN, inspect.isfunction) if not name.startswith("_")
    }
    assert methods - {"flush"} == set(FUNCTIONS)
    assert set(FUNCTIONS) <= {n for n, _ in inspect.getmembers(SimHost, inspect.isfunction)}


def _db(host: SimHost) -> str:
    (found,) = [e["ID"] for e in host.endpoints.values() if e["Name"].endswith("db-1_eth0")]
    return str(found)


def test_calls_latency_and_failures_by_function() -> None:
    host = calico_host(sc.PODS)
    db = _db(host)
    refused: Counter[str] = Counter()

    def fault(call: str, target: str) -> bool:
        if call == "ModifyEndpoint" and target == db:
            refused[call] += 1
            return True
        return False

    host.fault = fault
    metrics = Metrics(process=False)
    ticks = itertools.count()

    async def main() -> None:
        async with node(host) as (dp, platform):
            # A fake timer: each call reads it twice, a quarter second apart.
            platform.bind_metrics(metrics, timer=lambda: next(ticks) / 4)
            await send(dp, *messages())
            await send(
                dp,
                pb.ServiceUpdate(
                    name="web", namespace="prod", type="ClusterIP", cluster_ips=["10.96.0.10"]
                ),
            )
            assert dp.in_sync

    run_trio(main)
    r = metrics.registry
    # Calls are every HCN function the host counted (opens, queries and
    # closes too); latency is one observation per operation, named by the
    # function doing its work; a failed write is an error whether it was an
    # operation of its own or went through the handle of a read.
    calls = {(name,): float(n) for name, n in host.calls.items()}
    assert refused["ModifyEndpoint"] > 0
    assert calls[("OpenEndpoint",)] > calls[("QueryEndpointProperties",)] > 0
    errors = {k: v for k, v in samples(r, "dataplane_hns_call_errors_total").items() if v}
    count = samples(r, "dataplane_hns_call_duration_seconds_count")
    assert (samples(r, "dataplane_hns_calls_total"), errors) == (
        calls,
        {("ModifyEndpoint",): float(refused["ModifyEndpoint"])},
    )
    assert {k[0] for k in count} <= set(FUNCTIONS.values())
    # Never part of another operation: one observation per call.
    alone = ("HNSCall", "EnumerateNetworks", "EnumerateEndpoints", "ModifyNetwork")
    assert {k: v for k, v in count.items() if k[0] in alone} == {
        k: v for k, v in calls.items() if k[0] in alone
    }
    assert samples(r, "dataplane_hns_call_duration_seconds_sum") == {
        k: v / 4 for k, v in count.items()
    }
