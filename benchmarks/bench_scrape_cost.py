"""What one scrape costs the driver's process, measured where nothing else runs.

``bench_scrape.py`` times applies with and without a scraper; on 2 cores
its runs of one condition spread 11-16 %, more than the 5 % it judges. This
measures the cost itself, which bounds the delay: the CPU time the
driver's process spends serving scrapes, per request, with its own HTTP
server (:class:`~dataplane.ops.server.OpsServer`) and its own metrics over
the state of a generated node (``benchmarks/_node.py``, ``--endpoints``
endpoints programmed on the in-memory platform, so every family and label
set of the driver's page is there). The main thread sleeps: every CPU
second the process spends is the server's (accepting, parsing, answering,
rendering when the page is due).

A child process makes ``--requests`` GETs, each on a new connection as
Prometheus makes them, one after the other; the process's CPU time
(``time.process_time``, all threads) is read before and after. Paths:

* ``/metrics`` as served: rendered at most once a second (the default);
* ``/metrics`` rendered for every request (``metrics_max_age`` 0): the
  render's own cost, which a scraper every 100 ms pays once a second;
* ``/livez``: the HTTP handling alone, a few bytes of JSON.

The share of one core a scraper every 100 ms takes is 10 x the cost per
request (rendered one request in ten); the main loop loses at most that.

Measured 2026-11-24 on 2 cores, 5,000 endpoints: see docs/benchmarks.md
(*Scraping under load*).

Usage: python benchmarks/bench_scrape_cost.py [--quick] [--requests N]
       [--endpoints N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trio

from benchmarks._common import machine, markdown_table
from benchmarks._node import NodeBuilder, Sizes
from dataplane.core.loop import Dataplane
from dataplane.ops.address import ListenAddress
from dataplane.ops.metrics import Metrics
from dataplane.ops.observer import Observer
from dataplane.ops.server import METRICS_MAX_AGE, OpsServer
from dataplane.sim import SimPlatform

_CLIENT = """
import http.client, sys
port, path, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
size = 0
for _ in range(count):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    response = conn.getresponse()
    size = len(response.read())
    assert response.status in (200, 503), response.status
    conn.close()
print(size)
"""


def node_observer(endpoints: int) -> Observer:
    """An observer whose platform holds a generated node, as after its first apply."""
    sizes = Sizes(endpoints=endpoints, policies=20, sets=50, members=100, spare=0)
    observer = Observer(SimPlatform(), metrics=Metrics())
    dataplane = Dataplane(observer.platform, observer=observer)
    for message in NodeBuilder(sizes, "nft").snapshot():
        dataplane.send_message(message)
    dataplane.close_input()
    trio.run(dataplane.run)
    return observer


def cost(observer: Observer, path: str, requests: int, max_age: float) -> tuple[float, int]:
    """Server CPU seconds per request, and the response's size."""
    server = OpsServer(observer, ListenAddress("127.0.0.1", 0), metrics_max_age=max_age)
    server.start()
    try:
        argv = [sys.executable, "-c", _CLIENT, str(server.port), path, "1"]
        subprocess.run(argv, check=True, capture_output=True)  # warm: first render, imports
        before = time.process_time()
        argv[-1] = str(requests)
        done = subprocess.run(argv, check=True, capture_output=True, text=True)
        spent = time.process_time() - before
    finally:
        server.close()
    return spent / requests, int(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--endpoints", type=int, default=5000)
    parser.add_argument("--quick", action="store_true", help="300 requests, 200 endpoints")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.endpoints = 300, 200
    started = time.perf_counter()
    observer = node_observer(args.endpoints)
    print(f"node of {args.endpoints:,} endpoints applied in {time.perf_counter() - started:.1f} s")
    rows = []
    cases = (
        ("/metrics", METRICS_MAX_AGE, "as served (rendered at most once a second)"),
        ("/metrics", 0.0, "rendered for every request"),
        ("/livez", METRICS_MAX_AGE, "HTTP handling alone"),
    )
    per: dict[str, float] = {}
    for path, max_age, what in cases:
        seconds, size = cost(observer, path, args.requests, max_age)
        per[what] = seconds
        rows.append([path, what, f"{seconds * 1e6:,.0f} µs", f"{size:,} B"])
    print(machine())
    print(f"{args.requests:,} requests per case, each on a new connection\n")
    print(markdown_table(["path", "case", "server CPU per request", "response"], rows))
    served = per[cases[0][2]]
    render = per[cases[1][2]] - per[cases[2][2]]
    share = 10 * served + max(render, 0.0)
    print(
        f"\nA scraper every 100 ms: 10 requests a second at {served * 1e6:,.0f} µs, plus one"
        f" render a second ({max(render, 0.0) * 1e3:.1f} ms beyond the HTTP handling):"
        f" {share * 100:.2f} % of one core, the most it can take from the loop."
    )


if __name__ == "__main__":
    main()
