"""Where a node's service state lives in memory, by object kind (issue 48, item 2).

The driver's state for ``--services`` ClusterIP Services of ``--endpoints``
endpoints each (one EndpointSlice per service), built the way the driver
builds it from the API, without the API server or the kernel: each
Service and EndpointSlice, shaped as the API server returns them, is handed
to :class:`~dataplane.kube.source.KubeServices` as its reflectors hand
them over (and dropped after, as a list page's objects are), the model
values taken (and kept, as the services writer keeps them), and each
given to an nftables
:class:`~dataplane.linux.nftables.service_table.ServiceTable`
(``set_service``: what it keeps to make the elements from; nothing
written). Each size runs in a process of its own.

Measured two ways. By object kind: every object reachable from the
state, counted once, by type, with ``sys.getsizeof``. By the module that
allocated it: ``tracemalloc``'s live allocations after a second build
(tracing starts after the imports, so the interpreter and the modules are
not in it). *RSS* is the process's resident set after the first,
untraced build, imports included.

Usage: python benchmarks/bench_memory.py [--services 1000,10000,20000] [--endpoints 10]
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tracemalloc
from collections import Counter
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine, markdown_table
from dataplane.kube.source import KubeServices
from dataplane.linux.kernel.cmd import CommandResult
from dataplane.linux.nftables.service_layout import ServiceLayout
from dataplane.linux.nftables.service_table import ServiceTable

NS = "bench"
_GROUPS = (
    ("<string>", "dataclass instances (their generated __init__)"),
    ("dataplane/kube/", "the API's objects, parsed (kube/)"),
    ("dataplane/model/", "model values (model/)"),
    ("dataplane/linux/nftables/", "the services table: claims, shared counts (nftables/)"),
)


def _address(i: int) -> str:
    return f"10.{64 + i // 65536}.{(i // 256) % 256}.{i % 256}"


def service_object(i: int) -> dict[str, Any]:
    """A ClusterIP Service as the API server returns it."""
    name = f"s{i}"
    cluster_ip = f"10.{96 + i // 65536}.{(i // 256) % 256}.{i % 256}"
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": "2026-11-28T00:00:00Z",
            "managedFields": [{"manager": "bench", "operation": "Update", "fieldsV1": {}}],
        },
        "spec": {
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 80}],
            "clusterIP": cluster_ip,
            "clusterIPs": [cluster_ip],
            "type": "ClusterIP",
            "sessionAffinity": "None",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster",
        },
        "status": {"loadBalancer": {}},
    }


def slice_object(i: int, endpoints: int) -> dict[str, Any]:
    """Its one EndpointSlice, as the API server returns it."""
    name = f"s{i}"
    return {
        "metadata": {
            "name": f"{name}-1",
            "namespace": NS,
            "uid": f"10000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(100000 + i),
            "labels": {"kubernetes.io/service-name": name},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [
            {
                "addresses": [_address(i * endpoints + e)],
                "nodeName": "elsewhere",
                "conditions": {"ready": True, "serving": True, "terminating": False},
            }
            for e in range(endpoints)
        ],
    }


class _NoRunner:
    netns = None

    async def run(self, argv: Any, *, stdin: bytes | None = None, check: bool = True) -> Any:
        return CommandResult(0, b"", b"")


def build(
    services: int, endpoints: int, reader: Any = None
) -> tuple[KubeServices, dict[Any, Any], ServiceTable]:
    """The driver's state for the node, as the first lists leave it: the
    source, the model values (the services writer keeps them, to write a
    family's table again) and the table (``reader``: what its applies read
    the kernel with, if any run)."""
    source = KubeServices(api=None, node_name="node-1", node_port_ranges=lambda: [(30000, 32767)])  # type: ignore[arg-type]
    for i in range(services):
        source._services.upsert((NS, f"s{i}"), service_object(i))  # as a reflector does
        source._slices.upsert((NS, f"s{i}-1"), slice_object(i, endpoints))
    layout = ServiceLayout(4, "cali-svc", 0x4000000)
    table = ServiceTable(layout, _NoRunner(), lambda c: None, reader)
    kept = source.take_dirty()
    for value in kept.values():
        assert value is not None
        table.set_service(value)
    return source, kept, table


def by_kind(root: object, top: int) -> list[tuple[str, int, float]]:
    """(type, count, MB) of every object reachable from ``root`` (counted
    once), largest first. A walk, not the collector's list: it leaves out
    the containers it stops tracking (tuples and dicts of strings and
    bytes), which are most of the state."""
    seen: set[int] = set()
    count: Counter[str] = Counter()
    size: Counter[str] = Counter()
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (type, ModuleType, FunctionType)):
            continue
        seen.add(id(obj))
        kind = type(obj).__qualname__
        count[kind] += 1
        size[kind] += sys.getsizeof(obj)
        todo.extend(gc.get_referents(obj))
    return [(k, count[k], size[k] / 1e6) for k, _ in size.most_common(top)]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(services: int, endpoints: int) -> None:
    """One size: untraced first (RSS, kinds), then again under tracemalloc."""
    gc.collect()
    state = build(services, endpoints)
    gc.collect()
    result: dict[str, Any] = {"services": services, "rss": rss_mb(), "kinds": by_kind(state, 14)}
    del state
    gc.collect()
    tracemalloc.start()
    state = build(services, endpoints)
    gc.collect()
    snapshot = tracemalloc.take_snapshot()
    tracemalloc.stop()
    groups: Counter[str] = Counter()
    for stat in snapshot.statistics("filename"):
        name = stat.traceback[0].filename
        label = next((g for prefix, g in _GROUPS if prefix in name), "everything else")
        groups[label] += stat.size
    result["traced"] = sum(groups.values()) / 1e6
    result["groups"] = {k: v / 1e6 for k, v in groups.items()}
    del state
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", default="1000,10000,20000")
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.endpoints)
        return
    print(machine())
    results = []
    for n in (int(s) for s in args.services.split(",")):
        argv = [sys.executable, __file__, "--child", str(n), "--endpoints", str(args.endpoints)]
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out))
    sizes = [f"{r['services']:,} x {args.endpoints}" for r in results]
    labels = sorted({g for r in results for g in r["groups"]})
    rows = [[g, *(f"{r['groups'].get(g, 0):.1f} MB" for r in results)] for g in labels]
    rows.append(["all traced", *(f"{r['traced']:.1f} MB" for r in results)])
    rss = [f"{r['rss']:.0f} MB" for r in results]
    rows.append(["RSS, untraced (with the interpreter and modules)", *rss])
    print(markdown_table(["allocated by", *sizes], rows))
    print()
    last = results[-1]
    print(f"By object kind at {last['services']:,} services:")
    print(
        markdown_table(
            ["kind", "objects", "MB"],
            [[k, f"{n:,}", f"{mb:.1f}"] for k, n, mb in last["kinds"]],
        )
    )


if __name__ == "__main__":
    main()
