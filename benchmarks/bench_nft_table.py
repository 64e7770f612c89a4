"""One new endpoint on a policy node: the nftables table programmer against iptables.

The filter table of a node with ``--endpoints`` workload endpoints (each
with a tier of two policies and a namespace profile, ``--policies``
policies of a few rules each, the static chains and the dispatch trees)
is rendered once by the driver's own renderers and loaded into a
throwaway namespace by

* **nft**: ``NftTable`` (``dataplane/linux/nftables/table.py``), the
  rules spelled by the nft serialiser, one ``nft -f`` per apply;
* **iptables-nft** and **iptables-legacy**: the driver's iptables
  ``Table``, one ``iptables-restore`` per apply;

then ``--changes`` times an endpoint is added (its two chains, the
dispatch chains that change) and applied, and removed and applied. Each
apply is timed from the call to its return; the renderers' time is not
counted (it is the same for every backend). The issue's goal: one new
endpoint on the 1,000-endpoint node p99 <= 15 ms. With the nft backend
the table is then probed: what one ``nft -f`` costs by itself for the
smallest structural change into our table, into an empty table of its
own (the tool's floor), and with the new rule's handle echoed; and what
one element costs through our own writer, a verdict (which makes the
kernel validate the whole table) and plain data.

Measured 2026-11-24 (2 cores, kernel 6.18, nft 1.0.6, defaults): one new
endpoint 31.7 / 67.3 ms (p50 / p99) on nft, 30.2 / 42.0 ms iptables-nft,
173.2 / 228.7 ms iptables-legacy; nft -f of one chain into our table 12.1
ms p50, into an empty table (the floor) 7.5 ms; a verdict element through
our writer 2.40 / 4.77 ms, a data element 0.06 / 0.16 ms.

Usage (root, nft and iptables installed): python benchmarks/bench_nft_table.py
    [--endpoints N] [--policies N] [--changes N] [--backends nft,iptables-nft,...]
It re-executes itself inside the namespace it creates, one per backend.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, Protocol, TypeVar

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import each_backend, machine, percentile, print_row
from dataplane.config import Config
from dataplane.linux.iptables.backend import IptablesCommands
from dataplane.linux.iptables.serialise import IptablesSerialiser
from dataplane.linux.iptables.table import Table
from dataplane.linux.kernel.cmd import ProcessRunner
from dataplane.linux.nftables.elements import (
    NFPROTO_IPV4,
    Element,
    ElementChange,
    ElementWriter,
    Verdict,
    addr,
    ifname,
)
from dataplane.linux.nftables.serialise import NftSerialiser
from dataplane.linux.nftables.table import BaseChain, NftTable
from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.render.filter import FilterRenderer
from dataplane.linux.render.rule import RuleRenderer
from dataplane.linux.rules.chain import Chain, Serialiser
from dataplane.linux.rules.marks import Marks
from dataplane.model import (
    Action,
    DirectionPolicy,
    EffectivePolicy,
    Policy,
    PolicyKey,
    PortRange,
    Profile,
    Rule,
    TierPolicies,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)

HOOKS = {
    "INPUT": "type filter hook input priority filter",
    "FORWARD": "type filter hook forward priority filter",
    "OUTPUT": "type filter hook output priority filter",
}


R = TypeVar("R")
HEADER = ["backend", "load", "add p50 ms", "add p99 ms", "remove p50 ms", "remove p99 ms"]


class Programmer(Protocol):
    @property
    def writes(self) -> int: ...

    async def apply(self) -> bool: ...


def policies(count: int) -> dict[PolicyKey, Policy]:
    out = {}
    for i in range(count):
        rules = (
            Rule(Action.ALLOW, protocol="tcp", dst_ports=(PortRange(80 + i, 80 + i),)),
            Rule(Action.ALLOW, src_nets=(f"10.{i % 250}.0.0/16", "192.168.0.0/16")),
            Rule(Action.DENY, protocol="udp", dst_ports=(PortRange(5000, 5100),)),
            Rule(Action.ALLOW, protocol="icmp"),
        )
        out[PolicyKey(f"p{i}", "ns", "NetworkPolicy")] = Policy("default", rules, rules)
    return out


def _endpoint(i: int) -> WorkloadEndpoint:
    return WorkloadEndpoint(
        WorkloadEndpointKey("k8s", f"ns/pod-{i}", "eth0"),
        f"cali{i:011x}",
        ipv4_nets=(f"10.65.{i // 250}.{i % 250 + 1}/32",),
    )


def _effective(i: int, keys: list[PolicyKey]) -> EffectivePolicy:
    tier = TierPolicies("default", (keys[i % len(keys)], keys[(i + 1) % len(keys)]), Action.DENY)
    direction = DirectionPolicy((tier,), ("kns.ns",))
    return EffectivePolicy(direction, direction)


class Node(Generic[R]):
    """The node's filter table, rendered in one syntax."""

    def __init__(self, out: Serialiser[R], policies: dict[PolicyKey, Policy]) -> None:
        config = Config()
        marks = Marks.from_mask(config.iptables_mark_mask)
        rules = RuleRenderer(4, marks, lambda _s, _v: None, config.log_prefix)
        self.render = FilterRenderer(4, config, marks, ChainNames(), rules, out)
        self.policies = policies
        self.keys = list(policies)

    def static(self) -> list[Chain[R]]:
        chains = self.render.static_chains()
        chains.append(Chain(self.render.names.top("svc-reject")))
        for key, policy in self.policies.items():
            chains += self.render.policy_chains(key, policy)
        chains += self.render.profile_chains("kns.ns", Profile(inbound=(Rule(Action.ALLOW),)))
        chains += self.render.dispatch.hosts([])
        return chains

    def endpoint(self, i: int) -> list[Chain[R]]:
        return self.render.workload_chains(_endpoint(i), _effective(i, self.keys))

    def dispatch(self, endpoints: range | list[int]) -> list[Chain[R]]:
        return self.render.dispatch.workloads(_endpoint(i).name for i in endpoints)


async def _measure(
    table: Programmer,
    put: Callable[[list[Chain[R]]], None],
    node: Node[R],
    endpoints: int,
    changes: int,
) -> tuple[float, list[float], list[float]]:
    everyone = list(range(endpoints))
    chains = node.static() + [c for i in everyone for c in node.endpoint(i)]
    put(chains + node.dispatch(everyone))
    start = time.perf_counter()
    await table.apply()
    load = time.perf_counter() - start
    added: list[float] = []
    removed: list[float] = []
    for n in range(changes):
        new = endpoints + n
        put(chains + node.endpoint(new) + node.dispatch([*everyone, new]))
        start = time.perf_counter()
        assert await table.apply()
        added.append(time.perf_counter() - start)
        put(chains + node.dispatch(everyone))
        start = time.perf_counter()
        assert await table.apply()
        removed.append(time.perf_counter() - start)
    return load, added, removed


async def _run(backend: str, endpoints: int, policy_count: int, changes: int) -> list[list[str]]:
    runner = ProcessRunner()
    config = Config()
    marks = Marks.from_mask(config.iptables_mark_mask)
    policy_set = policies(policy_count)
    if backend == "nft":
        nft_node = Node(NftSerialiser(4, marks), policy_set)
        table = NftTable("ip", "calico", runner)
        for builtin, spec in HOOKS.items():
            hook = nft_node.render.hooks()[builtin]
            table.set_base_chain(BaseChain(f"filter-{builtin}", spec, hook))
        load, added, removed = await _measure(table, table.set_chains, nft_node, endpoints, changes)
    else:
        ipt_node = Node(IptablesSerialiser(marks), policy_set)
        kind = backend.removeprefix("iptables-")
        ipt = Table("filter", 4, runner, IptablesCommands.for_backend(kind, 4))
        for builtin, rules in ipt_node.render.hooks().items():
            ipt.set_hooks(builtin, rules)
        load, added, removed = await _measure(ipt, ipt.set_chains, ipt_node, endpoints, changes)
    ms = [1000 * percentile(v, q) for v in (added, removed) for q in (50, 99)]
    rows = [[backend, f"{load:.2f} s", *(f"{x:.1f}" for x in ms)]]
    if backend == "nft":
        rows += await _probes(runner, changes)
    return rows


def _elements(runner: ProcessRunner, changes: int) -> list[list[str]]:
    """What an endpoint made of data would cost: one element per transaction
    through our own writer, into a verdict map (interface to a chain that
    exists; the kernel then validates the whole table) and into a data set
    (interface and address, as anti-spoofing would be)."""
    del runner  # the writer talks netlink itself
    # The map is used by a base chain, as endpoint dispatch would be: the
    # kernel validates what its verdicts reach.
    script = (
        "add map ip calico probe-dispatch { type ifname : verdict; }\n"
        "add set ip calico probe-sources { type ifname . ipv4_addr; }\n"
        "add chain ip calico probe-forward { type filter hook forward priority 10; }\n"
        "add rule ip calico probe-forward iifname vmap @probe-dispatch\n"
        "add rule ip calico probe-forward iifname . ip saddr @probe-sources accept\n"
    )
    subprocess.run(["nft", "-f", "-"], input=script.encode(), check=True)
    target = ChainNames().to_workload(_endpoint(0).name)
    writer = ElementWriter()

    def verdict(n: int) -> Element:
        return Element((ifname(f"probe{n}"),), verdict=Verdict("goto", target))

    def data(n: int) -> Element:
        return Element((ifname(f"probe{n}"), addr(f"10.99.{n // 250}.{n % 250 + 1}")))

    cases: dict[str, Callable[[int], Element]] = {
        "verdict element (interface to its chain)": verdict,
        "data element (interface . address)": data,
    }
    sets = ("probe-dispatch", "probe-sources")
    rows = []
    for (label, element), name in zip(cases.items(), sets, strict=True):
        times = []
        for n in range(min(changes, 50)):
            change = ElementChange("add", NFPROTO_IPV4, "calico", name, (element(n),))
            start = time.perf_counter()
            writer([change])
            times.append(time.perf_counter() - start)
        ms = [f"{1000 * percentile(times, q):.2f}" for q in (50, 99)]
        rows.append([f"element writer: {label}", "", *ms, "", ""])
    return rows


async def _probes(runner: ProcessRunner, changes: int) -> list[list[str]]:
    """What one nft -f costs by itself, with our table loaded: the smallest
    structural change into our table, the same into an empty table of its
    own (the tool's floor: a process, its cache, one small commit), and
    asking nft to echo the new rule's handle."""
    cases = {
        "one chain of one rule, into our table": (
            ["nft", "-f", "-"],
            "add chain ip calico probe{n}\nadd rule ip calico probe{n} accept\n",
        ),
        "floor: the same, into an empty table": (
            ["nft", "-f", "-"],
            "add table ip floor\nadd chain ip floor c{n}\nadd rule ip floor c{n} accept\n",
        ),
        "one rule, handle echoed (nft -e -a)": (
            ["nft", "-e", "-a", "-f", "-"],
            "add rule ip calico probe0 accept\n",
        ),
    }
    rows = _elements(runner, changes)
    for label, (argv, script) in cases.items():
        times = []
        for n in range(min(changes, 20)):
            start = time.perf_counter()
            await runner.run(argv, stdin=script.format(n=n).encode())
            times.append(time.perf_counter() - start)
        ms = [f"{1000 * percentile(times, q):.1f}" for q in (50, 99)]
        rows.append([f"nft -f: {label}", "", *ms, "", ""])
    return rows


def inside(backend: str, endpoints: int, policy_count: int, changes: int) -> None:
    for row in trio.run(_run, backend, endpoints, policy_count, changes):
        print_row(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--policies", type=int, default=50)
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--backends", default="nft,iptables-nft,iptables-legacy")
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [str(args.endpoints), str(args.policies), str(args.changes)]
    if args.inside:
        inside(args.backend, *map(int, sizes))
        return
    print(machine())
    print(f"{args.endpoints} endpoints, {args.policies} policies, {args.changes} changes each way")
    argv = ["--endpoints", sizes[0], "--policies", sizes[1], "--changes", sizes[2]]
    each_backend(__file__, HEADER, args.backends, argv, "dpnfttbl")


if __name__ == "__main__":
    main()
