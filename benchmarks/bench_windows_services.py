"""Windows service load balancing on a simulated HNS host with a realistic per-call latency.

The cluster (``benchmarks/_lb_cluster.py``; every size is an option):
2,000 ClusterIP services, one cluster IP and one TCP port each (so one
HNS load balancer each), x 5 backends, 60 % of them remote: 2 local + 3
remote per service, drawn at random (seeded) from pools of 200 pods on
this node and 200 on each of 20 remote nodes. A pod backs several
services, as in real clusters, so remote endpoints are shared: one per
distinct remote pod drawn. The remote nodes have VTEPs and the host's
Calico network is Overlay, so remote backends are reached over VXLAN; the
host already holds the CNI's endpoint for every local pod. No
WorkloadEndpointUpdate is sent: a load balancer finds a local backend's
HNS endpoint by address in the endpoint listing, not through Felix's
workloads. No RouteUpdate either: RemoteSubnetRoutes are the VXLAN
programmer's (``bench_windows.py`` territory), not the load balancers'.
Every HCN call takes ``--latency`` seconds (20 ms: a loaded real host's
order of magnitude), counted as a real host is called through
``computenetwork.dll``: a listing is an enumerate plus an open, a query
and a close per object; a create is the create, a query and a close.
The periodic re-read is off (EndpointRefreshInterval 0) until the last
step, which turns it on: a refresh tick landing in a measured step would
end the step with its own apply.

For each HNS version (15.4, which has ``ModifyLoadBalancer``, and 12.0,
which does not):

1. **programmed**: all messages in until the loop reports DataplaneInSync
   (the first apply done), and the HCN calls that took, beside the
   **floor**: the fewest calls through the DLL that can program it (read
   the networks and the local endpoints backends map to, then one create
   and one close per load balancer and per distinct remote pod) at
   ``--latency`` each;
2. **one local backend swapped**: a service's local backend replaced by
   another local pod: the load balancer alone (goal: 1 write on 15.4,
   delete + create before);
3. **one remote backend swapped**: a remote backend that no other service
   names replaced by a new pod on the same node: the same load-balancer
   write(s), plus one ``CreateEndpoint`` (before the load balancer names
   it) and one ``DeleteEndpoint`` (after it no longer does);
4. **one quiet refresh**: EndpointRefreshInterval set to
   ``--refresh-interval`` (Felix's default 90 s), then the calls of one
   whole interval with nothing changed, beside what re-listing everything
   costs on this host (what each refresh cost before it was incremental;
   goal: at least 10x fewer).

The host's state is checked after each step (every service's load
balancer names exactly its backends' endpoints), so a fast wrong answer
cannot pass.

kube-proxy's winkernel on the same data: assumed to create each remote
endpoint once and share it, so its initial sync makes the same creates;
the difference is the change path, where it deletes and re-creates every
load balancer of the changed service. That is kube-proxy before 1.31;
from 1.31 it also modifies in place where HNS has ``ModifyLoadBalancer``
(kubernetes/kubernetes#124092).

Usage: python benchmarks/bench_windows_services.py [--quick] [--services N]
       [--backends N] [--remote-share F] [--remote-nodes N] [--local-pods N]
       [--pods-per-node N] [--latency SECONDS] [--versions 15.4,12.0]
       [--refresh-interval SECONDS]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path

import trio

from dataplane.wire._pb import felixbackend_pb2 as pb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine, markdown_table
from benchmarks._hns import Step, calls_text, program, step
from benchmarks._lb_cluster import LBS_PER_SERVICE, Cluster, Sizes, Swap, provider_of
from benchmarks._runs import apply_quick
from dataplane.core.loop import Dataplane
from dataplane.windows.hns.hcn import HnsVersion, writes
from dataplane.windows.platform import WindowsPlatform
from dataplane.windows.services.remote_endpoints import REMOTE_PREFIX
from dataplane.windows.sim.simhost import SimHost
from testbed.hns import NETWORK_ID, calico_host

NETWORKS = 2  # the host's Calico network and its nat network


@dataclass(frozen=True, slots=True)
class Result:
    version: HnsVersion
    programmed: Step
    local: Step
    local_swap: Swap
    remote: Step
    remote_swap: Swap
    refresh: Step  # one refresh interval with nothing changed
    relisting: int  # what re-listing everything costs on this host (the refresh before)


def _host(cluster: Cluster, version: HnsVersion, latency: float) -> SimHost:
    """An Overlay host holding the CNI's endpoint for every local pod (uncounted)."""
    host = calico_host([], version, latency=latency, network_type="Overlay")
    for pod in cluster.local_pods:
        host.add_local_endpoint(
            NETWORK_ID,
            {
                "Name": f"bench_{pod.address}_eth0",
                "IpConfigurations": [{"IpAddress": pod.address, "PrefixLength": 16}],
            },
        )
    return host


def _check(host: SimHost, cluster: Cluster, services: Iterable[int]) -> None:
    """The host holds what the cluster asks: each service's LB names its backends' endpoints.

    Remote endpoints must also send to their pod's node, and be one per distinct remote pod.
    """
    address = {
        endpoint_id: str(ep["IpConfigurations"][0]["IpAddress"])
        for endpoint_id, ep in host.endpoints.items()
    }
    by_vip = {lb["FrontendVIPs"][0]: lb for lb in host.load_balancers.values()}
    for i in services:
        lb = by_vip.get(cluster.cluster_ip(i))
        named = {address.get(e.upper(), e) for e in lb["HostComputeEndpoints"]} if lb else set()
        wanted = {p.address for p in cluster.members[i]}
        if named != wanted:
            raise RuntimeError(f"{cluster.name(i)}: HNS balances to {named}, wanted {wanted}")
    ours = [e for e in host.endpoints.values() if str(e.get("Name", "")).startswith(REMOTE_PREFIX)]
    distinct = len(cluster.remote_references())
    if len(ours) != distinct:
        raise RuntimeError(f"{len(ours)} remote endpoints, wanted {distinct}")
    for ep in ours:
        pod = str(ep["IpConfigurations"][0]["IpAddress"])
        (policy,) = ep["Policies"]
        if policy["Settings"]["ProviderAddress"] != provider_of(pod):
            raise RuntimeError(f"remote endpoint {pod}: provider {policy['Settings']}")


def relisting_calls(host: SimHost) -> int:
    """A full listing of networks, endpoints and load balancers through the DLL: an
    enumerate each, then an open, a query and a close per object."""
    objects = len(host.networks) + len(host.endpoints) + len(host.load_balancers)
    return 3 + 3 * objects


async def quiet_refresh(
    dp: Dataplane, host: SimHost, config: pb.ConfigUpdate, interval: float
) -> Step:
    """Turn the periodic re-read on, then count one interval of it with nothing changed."""
    turned_on = dict(config.config)
    turned_on["EndpointRefreshInterval"] = str(interval)
    await step(dp, host, pb.ConfigUpdate(config=turned_on))
    before = Counter(host.calls)
    start = time.perf_counter()
    await trio.sleep(interval + interval / 20)  # the cycle's ten ticks, the last one done
    done = Step(time.perf_counter() - start, Counter(host.calls) - before)
    if writes(done.calls):
        raise RuntimeError(f"a quiet refresh wrote: {calls_text(writes(done.calls))}")
    return done


def run(sizes: Sizes, version: HnsVersion, latency: float, interval: float) -> Result:
    cluster = Cluster(sizes)
    host = _host(cluster, version, latency)
    platform = WindowsPlatform(host)

    async def swapped(dp: Dataplane, swap: Swap) -> Step:
        done = await step(dp, host, cluster.backends(swap.service))
        _check(host, cluster, [swap.service])
        return done

    async def main() -> Result:
        dp = Dataplane(platform)
        snapshot = cluster.snapshot()
        (config,) = [m for m in snapshot if isinstance(m, pb.ConfigUpdate)]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            programmed = await program(dp, host, snapshot)
            _check(host, cluster, range(sizes.services))
            local_swap = cluster.swap_local()
            local = await swapped(dp, local_swap)
            remote_swap = cluster.swap_remote()
            remote = await swapped(dp, remote_swap)
            refresh = await quiet_refresh(dp, host, config, interval)
            _check(host, cluster, range(sizes.services))
            dp.close_input()
        return Result(
            version,
            programmed,
            local,
            local_swap,
            remote,
            remote_swap,
            refresh,
            relisting_calls(host),
        )

    return trio.run(main)


# --- what the calls should be, and kube-proxy's -----------------------------------


def _endpoint_calls(swap: Swap) -> Counter[str]:
    return Counter(
        {"CreateEndpoint": int(swap.new_appears), "DeleteEndpoint": int(swap.old_vanishes)}
    )


def goal(swap: Swap, version: HnsVersion) -> Counter[str]:
    """The fewest calls for ``swap``: each LB of the service modified, or deleted and created."""
    n = LBS_PER_SERVICE
    if version.supports("ModifyLoadbalancer"):
        lbs = Counter(ModifyLoadBalancer=n)
    else:
        lbs = Counter(DeleteLoadBalancer=n, CreateLoadBalancer=n)
    return +(lbs + _endpoint_calls(swap))


def kube_proxy(swap: Swap) -> Counter[str]:
    """winkernel before 1.31: every LB of the changed service deleted and created again."""
    n = LBS_PER_SERVICE
    return +(Counter(DeleteLoadBalancer=n, CreateLoadBalancer=n) + _endpoint_calls(swap))


def floor_calls(cluster: Cluster) -> Counter[str]:
    """The fewest calls through the DLL: read what is there (the networks, and the
    local endpoints a backend's address maps to), then create and close each object."""
    creates = cluster.load_balancers() + len(cluster.remote_references())
    reads = NETWORKS + len(cluster.local_pods) + 1  # + kube-proxy's remote endpoint
    return Counter(
        HNSCall=1,
        Enumerate=3,
        Read=3 * reads,  # open, query, close
        Create=creates,
        Close=creates,
        OpenNetwork=2,  # the network the remote endpoints are made on, open and closed
    )


def kube_proxy_initial(cluster: Cluster) -> Counter[str]:
    """winkernel's creates for the same data (granted shared remote endpoints)."""
    return Counter(
        CreateLoadBalancer=cluster.load_balancers(),
        CreateEndpoint=len(cluster.remote_references()),
    )


# --- the report ---------------------------------------------------------------------


def _describe(swap: Swap, cluster: Cluster) -> str:
    name = cluster.name(swap.service)
    if swap.old.local:
        return f"{name}: local {swap.old.address} -> local {swap.new.address}"
    gone = "its endpoint goes" if swap.old_vanishes else "its endpoint stays (shared)"
    return f"{name}: remote {swap.old.address} ({gone}) -> new pod {swap.new.address}"


def report(sizes: Sizes, latency: float, results: list[Result]) -> str:
    cluster = Cluster(sizes)  # as generated: each run swapped backends in its own
    floor = floor_calls(cluster)
    floor_s = floor.total() * latency
    kube_initial = calls_text(kube_proxy_initial(cluster))
    programmed, changes, refreshes = [], [], []
    for r in results:
        measured = r.programmed.calls.total()
        ratio = f"{r.programmed.seconds / floor_s:.2f}x" if floor_s else "n/a"
        programmed.append(
            [
                str(r.version),
                f"{r.programmed.seconds:.1f} s",
                f"{measured:,} ({calls_text(writes(r.programmed.calls))})",
                f"{floor.total():,} calls, {floor_s:.1f} s",
                f"{measured / floor.total():.2f}x calls, {ratio} time",
                kube_initial,
            ]
        )
        for step_, swap in ((r.local, r.local_swap), (r.remote, r.remote_swap)):
            wanted = goal(swap, r.version)
            made = writes(step_.calls)
            changes.append(
                [
                    str(r.version),
                    _describe(swap, cluster),
                    f"{calls_text(made)} ({step_.calls.total()} in all)",
                    f"{calls_text(wanted)} ({'met' if made == wanted else 'missed'})",
                    f"{step_.seconds * 1000:.0f} ms",
                    calls_text(kube_proxy(swap)),
                ]
            )
        spent = r.refresh.calls.total()
        refreshes.append(
            [
                str(r.version),
                f"{spent:,} ({calls_text(r.refresh.calls)})",
                f"{spent * latency:.2f} s",
                f"{r.relisting:,} calls, {r.relisting * latency:.0f} s",
                f"{r.relisting / max(spent, 1):.0f}x fewer (goal >= 10x)",
            ]
        )
    references = sum(cluster.remote_references().values())
    head = (
        f"{sizes.services:,} ClusterIP services x {sizes.backends} backends"
        f" ({sizes.remote_backends} remote: {references:,} references to"
        f" {len(cluster.remote_references()):,} distinct pods on {sizes.remote_nodes} nodes;"
        f" {sizes.local_pods} local pods), {latency * 1000:.0f} ms per HCN call; {machine()}"
    )
    return "\n\n".join(
        [
            head,
            markdown_table(
                [
                    "HNS",
                    "programmed",
                    "HCN calls",
                    "floor",
                    "ratio",
                    "kube-proxy initial sync (same data)",
                ],
                programmed,
            ),
            markdown_table(
                [
                    "HNS",
                    "one backend swapped",
                    "HCN calls",
                    "goal",
                    "time",
                    "kube-proxy before 1.31",
                ],
                changes,
            ),
            markdown_table(
                [
                    "HNS",
                    "one quiet refresh interval: HCN calls",
                    "HNS time",
                    "re-listing everything (before)",
                    "ratio",
                ],
                refreshes,
            ),
        ]
    )


def _version(text: str) -> HnsVersion:
    major, _, minor = text.partition(".")
    return HnsVersion(int(major), int(minor or 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for f in fields(Sizes):
        kind = float if f.name == "remote_share" else int
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=f.default)
    parser.add_argument("--latency", type=float, default=0.020)
    parser.add_argument("--versions", default="15.4,12.0")
    parser.add_argument(
        "--refresh-interval", type=float, default=90.0, help="EndpointRefreshInterval, seconds"
    )
    parser.add_argument("--quick", action="store_true", help="a small cluster, for CI")
    args = parser.parse_args()
    apply_quick(args, {"services": 50, "latency": 0, "refresh-interval": 2})
    logging.basicConfig(level=logging.ERROR)
    sizes = Sizes(**{f.name: getattr(args, f.name) for f in fields(Sizes)})
    try:
        Cluster(sizes)
    except ValueError as exc:
        parser.error(str(exc))
    results = [
        run(sizes, _version(v), args.latency, args.refresh_interval)
        for v in args.versions.split(",")
    ]
    print(report(sizes, args.latency, results))


if __name__ == "__main__":
    main()
