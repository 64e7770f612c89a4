"""The driver's CPU on services from the API, in process (issue 48).

``--services`` ClusterIP Services of ``--endpoints`` endpoints each (one
EndpointSlice per service), shaped as the API server returns them
(``bench_memory.py``'s objects, made before the clock starts), taken the
way the driver takes them, without the API server or the kernel:

* *services*, *slices*: each object handed to
  :class:`~dataplane.kube.source.KubeServices` as a reflector hands it
  over (parsed into the model; on the loop while the lists arrive);
* *values*: ``take_dirty``, each service's value with its backends
  chosen for this node (on the loop once the lists are in);
* *outline*: each value given to an nftables
  :class:`~dataplane.linux.nftables.service_table.ServiceTable`
  (``set_service``: what a first apply records before its whole write).

The collector is off, as it is in the driver from its start until the
first apply's collect-and-freeze (``core/heap.py``): with it on, its full
passes over the growing heap were half of this. Each stage's best of
``--runs`` fresh builds in one process.

``--changes N``: then, on a table past its first apply (heap frozen,
collector on, as in the driver), N changes one at a time, each one
slice's endpoint moved, timed from the hand-over to the table's apply
returning, with nothing written (issue 48: one change costs the same at
any size; what the kernel and the API add is bench_kube_proxy.py's).

Usage: python benchmarks/bench_kube_values.py [--services 10000] [--endpoints 10] [--runs 5]
       [--changes N]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine, markdown_table, percentile
from benchmarks.bench_memory import NS, _NoRunner, build, service_object, slice_object
from dataplane.kube.source import KubeServices
from dataplane.linux.nftables.service_layout import ServiceLayout
from dataplane.linux.nftables.service_table import ServiceTable

STAGES = ("services", "slices", "values", "outline")


class _NothingHeld:
    """A kernel reader that finds none of the table: the first apply writes it all."""

    def elements(self, family: int, table: str, set_name: str) -> list[object]:
        return []

    def rules(self, family: int, table: str) -> list[object]:
        return []

    def set_names(self, family: int, table: str) -> list[str]:
        return []


def changes(services: int, endpoints: int, count: int) -> list[list[str]]:
    """``count`` changes after a first apply, each one slice's first
    endpoint moved to a new address, timed from the reflector's hand-over
    to the table's apply returning (the writer and the kernel left out).
    The heap is frozen after the first apply and the collector on, as in
    the driver (core/heap.py); its passes during the changes are counted."""
    source, _, table = build(services, endpoints, _NothingHeld())
    trio.run(table.apply)
    gc.collect()
    gc.freeze()
    gc.enable()
    pauses: list[float] = []
    began = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - began[0])

    gc.callbacks.append(timed)
    took = []
    for k in range(count):
        i = k * 7919 % services
        obj = slice_object(i, endpoints)
        obj["endpoints"][0]["addresses"] = [f"10.{200 + (k >> 16)}.{k >> 8 & 255}.{k & 255}"]
        started = time.perf_counter()
        source._slices.upsert((NS, f"s{i}-1"), obj)
        for value in source.take_dirty().values():
            assert value is not None
            table.set_service(value)
        trio.run(table.apply)
        took.append(time.perf_counter() - started)
    gc.callbacks.remove(timed)
    gc.disable()
    ms = [f"{percentile(took, q) * 1000:.2f}" for q in (50, 99)]
    worst = f"{max(pauses) * 1000:.2f}" if pauses else "-"
    return [[f"{services:,}", f"{ms[0]} / {ms[1]}", f"{len(pauses)}, longest {worst} ms"]]


def one_build(services: list[dict[str, object]], slices: list[dict[str, object]]) -> list[float]:
    """Seconds of each stage for one fresh source and table."""
    source = KubeServices(api=None, node_name="node-1", node_port_ranges=lambda: [(30000, 32767)])  # type: ignore[arg-type]
    marks = [time.perf_counter()]
    for i, obj in enumerate(services):
        source._services.upsert((NS, f"s{i}"), obj)  # as a reflector does
    marks.append(time.perf_counter())
    for i, obj in enumerate(slices):
        source._slices.upsert((NS, f"s{i}-1"), obj)
    marks.append(time.perf_counter())
    values = source.take_dirty()
    marks.append(time.perf_counter())
    table = ServiceTable(ServiceLayout(4, "cali-svc", 0x4000000), _NoRunner(), lambda c: None, None)  # type: ignore[arg-type]
    for value in values.values():
        assert value is not None
        table.set_service(value)
    marks.append(time.perf_counter())
    return [b - a for a, b in itertools.pairwise(marks)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=10000)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--changes", type=int, default=0, help="then time this many changes, one at a time"
    )
    args = parser.parse_args()
    services = [service_object(i) for i in range(args.services)]
    slices = [slice_object(i, args.endpoints) for i in range(args.services)]
    gc.collect()
    gc.disable()
    runs = [one_build(services, slices) for _ in range(args.runs)]
    best = [min(run[k] for run in runs) for k in range(len(STAGES))]
    print(machine())
    print(f"{args.services:,} services x {args.endpoints} endpoints, best of {args.runs}")
    rows = [[stage, f"{seconds:.3f} s"] for stage, seconds in zip(STAGES, best, strict=True)]
    rows.append(["all four", f"{sum(best):.3f} s"])
    print(markdown_table(["stage", "seconds"], rows))
    if args.changes:
        del runs
        header = ["services", "one change p50 / p99, ms", "collector passes"]
        print(markdown_table(header, changes(args.services, args.endpoints, args.changes)))


if __name__ == "__main__":
    main()
