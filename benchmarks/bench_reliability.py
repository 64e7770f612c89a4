"""Reliability on the real kernel: a crash mid-apply, tampering, a quarantined object.

Every figure comes from a real driver process on Felix's pipes
(``driver.py --platform linux`` in a network namespace holding one veth per
endpoint, as ``bench_linux.py`` builds the node):

1. **clean start**: time from the first write of the node's snapshot to
   ``DataplaneInSync`` in a fresh namespace. The state it leaves (every
   chain's rules, every IP set's members, our routes, the interface
   sysctls) is the reference.
2. **crash and restart**: in a second namespace the node is first
   programmed from an *older* snapshot (10 % more endpoints, policies and
   IP sets, other members), then a driver given the reference snapshot is
   SIGKILLed part-way through its apply (at a fraction of the clean
   start's time; what was in the kernel at that moment is reported), then
   a new driver is started with the reference snapshot. The figure is its
   time to ``DataplaneInSync``, and the end state must equal the clean
   start's exactly: no stale chain, rule, set, member, route or sysctl.
3. **tamper repair**: on the clean node, one object of each kind is
   damaged behind the driver's back (a policy chain flushed, the jump from
   ``FORWARD`` deleted, the largest IP set emptied, an endpoint's route
   deleted, an interface's ``proxy_arp`` reset) and the time until it is
   back exactly is measured. Repairs happen on the driver's refresh
   timers, so the figure is bounded by the interval (set here to
   ``--refresh`` seconds for iptables, IP sets and routes; Felix's and
   this driver's defaults are 90 s / 10 s / 90 s).
4. **quarantine**: the driver restarts (default refresh intervals) with a
   PATH whose restore tools refuse one policy
   (``tests/kernel/refusing_tools.py``). ``--samples`` endpoints are added
   one by one (time until each one's status is ``up``); then the refused
   policy goes to one endpoint, and as many endpoints are added and an
   unrelated policy changed as many times (until the changed rule is in
   the kernel) while it is quarantined (goal: one apply, < 1 s); last, the
   time for the fixed policy to leave quarantine.

Needs root, ``ip``, ``ipset``, ``sysctl`` and the chosen iptables backend;
every namespace it creates is deleted at the end.

Usage: python benchmarks/bench_reliability.py [--endpoints N] [--backend legacy|nft]
       [--refresh S] [--kill-at 0.3,0.6,0.9]
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from google.protobuf.message import Message

from benchmarks._common import machine, markdown_table, percentile
from benchmarks._node import ROUTE_PROTOCOL, NodeBuilder, Sizes, add_size_arguments, veth_node
from benchmarks._runs import require_root
from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.topology import Topology, sigterm_unwinds
from tests.felix_harness import FelixHarness
from tests.kernel.refusing_tools import refusing_env

GOAL_UNRELATED_S = 1.0
MARKER = "7777"  # the refusing tools refuse any rule line holding it
REFUSED = pb.PolicyID(name="bench.refuse-me")
CHANGED = pb.PolicyID(name="bench.unrelated")

# ---------------------------------------------------------------------------
# What is programmed, normalised so that two nodes can be compared.
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeState:
    """Our part of a namespace's kernel state, order-free where the kernel's is."""

    chains: dict[str, tuple[str, ...]]  # "ip6 filter cali-fw-x" -> rules in order
    sets: dict[str, tuple[str, frozenset[str]]]  # name -> (create line, members)
    routes: frozenset[str]
    sysctls: frozenset[str]

    def differences(self, other: NodeState) -> list[str]:
        out = []
        for key in sorted(self.chains.keys() | other.chains.keys()):
            mine, theirs = self.chains.get(key), other.chains.get(key)
            if mine != theirs:
                out.append(f"chain {key}: {mine!r:.150} here, {theirs!r:.150} there")
        for name in sorted(self.sets.keys() | other.sets.keys()):
            if name not in other.sets:
                out.append(f"IP set {name} only here")
            elif name not in self.sets:
                out.append(f"IP set {name} missing")
            elif self.sets[name] != other.sets[name]:
                out.append(f"IP set {name}: {_set_delta(self.sets[name], other.sets[name])}")
        for label, a, b in (
            ("route", self.routes, other.routes),
            ("sysctl", self.sysctls, other.sysctls),
        ):
            out += [f"{label} {x} only here" for x in sorted(a - b)]
            out += [f"{label} {x} missing" for x in sorted(b - a)]
        return out


def _set_delta(mine: tuple[str, frozenset[str]], theirs: tuple[str, frozenset[str]]) -> str:
    """What differs in one IP set, briefly."""
    extra, lost = sorted(mine[1] - theirs[1]), sorted(theirs[1] - mine[1])
    head = "" if mine[0] == theirs[0] else f"{mine[0]!r} vs {theirs[0]!r}; "
    return f"{head}{len(extra)} extra {extra[:2]}, {len(lost)} missing {lost[:2]}"


def _sh(netns: str, *argv: str) -> str:
    proc = subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.decode()[:300]}")
    return proc.stdout.decode()


def parse_save(family: str, text: str) -> dict[str, tuple[str, ...]]:
    """Chains of an iptables-save output: builtin policies and rules, no counters."""
    chains: dict[str, list[str]] = {}
    table = ""
    for line in text.splitlines():
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith(":"):
            name, policy = line[1:].split()[:2]
            chains[f"{family} {table} {name}"] = [f"policy {policy}"]
        elif line.startswith("-A "):
            chains[f"{family} {table} {line.split()[1]}"].append(line)
    return {k: tuple(v) for k, v in chains.items()}


def parse_ipset_save(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    created: dict[str, str] = {}
    members: dict[str, set[str]] = {}
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["create"]:
            # The hash seed and table sizing are the kernel's choice, not ours.
            kept, skip = [], False
            for word in words:
                if skip or word in {"initval", "hashsize", "bucketsize"}:
                    skip = not skip
                    continue
                kept.append(word)
            created[words[1]] = " ".join(kept)
            members[words[1]] = set()
        elif words[:1] == ["add"]:
            members[words[1]].add(" ".join(words[2:]))
    return {name: (created[name], frozenset(members[name])) for name in created}


def read_state(netns: str, backend: str, ifaces: frozenset[str]) -> NodeState:
    """The state, with the sysctls of ``ifaces`` (the endpoints' interfaces) and ``all``."""
    chains = parse_save("ip", _sh(netns, f"iptables-{backend}-save"))
    chains |= parse_save("ip6", _sh(netns, f"ip6tables-{backend}-save"))
    routes = set()
    for family in ("-4", "-6"):
        for r in json.loads(
            _sh(netns, "ip", "-j", family, "route", "show", "table", "all") or "[]"
        ):
            if r.get("protocol") in (str(ROUTE_PROTOCOL), ROUTE_PROTOCOL):
                routes.add(json.dumps(r, sort_keys=True))
    sysctls = {
        line
        for line in _sh(netns, "sysctl", "-a").splitlines()
        if ".conf." in line and line.split(".")[3] in ifaces | {"all"}
    }
    return NodeState(
        chains, parse_ipset_save(_sh(netns, "ipset", "save")), frozenset(routes), frozenset(sysctls)
    )


def ours(state: NodeState) -> tuple[int, int]:
    """How many of our chains and IP sets a state holds."""
    chains = sum(1 for k in state.chains if k.split()[2].startswith("cali"))
    return chains, sum(1 for name in state.sets if name.startswith("cali"))


# ---------------------------------------------------------------------------
# The nodes.
# ---------------------------------------------------------------------------


def snapshot(builder: NodeBuilder, refresh: float) -> list[Message]:
    msgs = builder.snapshot()
    config = msgs[0]
    assert isinstance(config, pb.ConfigUpdate)
    for key in ("IptablesRefreshInterval", "IpsetsRefreshInterval", "RouteRefreshInterval"):
        config.config[key] = str(refresh)
    return msgs


class Driver:
    """A driver process on Felix's pipes, its statuses kept with arrival times."""

    def __init__(self, netns: str, env: dict[str, str] | None = None) -> None:
        self.felix = FelixHarness("--platform", "linux", netns=netns, env=env)
        self.felix.watch()

    def send(self, msgs: list[Message]) -> float:
        """Write every message; the time the first write started."""
        start = time.monotonic()
        self.felix.send(*msgs)
        return start

    def in_sync(self, timeout: float) -> float:
        arrived, _ = self.felix.wait_for(lambda e: e.HasField("dataplane_in_sync"), timeout=timeout)
        return arrived

    def status(self, workload_id: str, wanted: str, since: int, timeout: float = 60) -> float:
        def match(e: pb.FromDataplane) -> bool:
            update = e.workload_endpoint_status_update
            return (
                e.HasField("workload_endpoint_status_update")
                and update.id.workload_id == workload_id
                and update.status.status == wanted
            )

        arrived, _ = self.felix.wait_for(match, since=since, timeout=timeout)
        return arrived

    def mark(self) -> int:
        return len(self.felix.received)

    def stop(self) -> str:
        self.felix.close_input()
        code, err = self.felix.wait(timeout=120)
        if code != 0:
            raise RuntimeError(f"driver exit {code}:\n{err[-2000:]}")
        return err


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``check`` (each poll is a kernel read); the time it first held."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.01)
    return time.monotonic()


# ---------------------------------------------------------------------------
# The measurements.
# ---------------------------------------------------------------------------


def crash_and_restart(
    topo: Topology,
    args: argparse.Namespace,
    *,
    older: list[Message],
    current: list[Message],
    clean_s: float,
    reference: NodeState,
    links: int,
    ifaces: frozenset[str],
) -> list[list[str]]:
    rows = []
    for fraction in args.kill_at:
        with veth_node(topo, "crs", links) as (netns, _):
            first = Driver(netns)
            first.send(older)
            first.in_sync(args.timeout)
            first.stop()
            # The node is programmed with the older state; now a driver with
            # the current one dies part-way through programming it.
            victim = Driver(netns)
            start = victim.send(current)
            time.sleep(max(0.0, start + fraction * clean_s - time.monotonic()))
            victim.felix.kill()
            at_kill = ours(read_state(netns, args.backend, ifaces))
            survivor = Driver(netns)
            start = survivor.send(current)
            converged = survivor.in_sync(args.timeout) - start
            survivor.stop()
            diff = read_state(netns, args.backend, ifaces).differences(reference)
            rows.append(
                [
                    f"{fraction:.0%} of a clean start",
                    f"{at_kill[0]} chains, {at_kill[1]} sets",
                    f"{converged:.2f} s",
                    f"{converged / clean_s:.2f}",
                    "equal" if not diff else f"{len(diff)} differences: {'; '.join(diff[:3])}",
                ]
            )
            print(f"crash at {fraction:.0%}: {rows[-1]}", flush=True)
    return rows


def _tampers(
    netns: str, backend: str, reference: NodeState, builder_ifaces: list[str]
) -> list[tuple[str, list[str], Callable[[], bool]]]:
    """(what, the damaging command, "is it back exactly?") per object kind."""
    ipt = f"iptables-{backend}"
    policy = max(
        (k for k in reference.chains if k.startswith("ip filter cali-pi-")),
        key=lambda k: len(reference.chains[k]),
    )
    policy_chain = policy.split()[2]
    forward = reference.chains["ip filter FORWARD"]
    jump = next(rule for rule in forward if "-j cali-FORWARD" in rule)
    big_set = max(
        (n for n in reference.sets if n.startswith("cali40")),
        key=lambda n: len(reference.sets[n][1]),
    )
    route = next(json.loads(r) for r in sorted(reference.routes) if '"dev": "cali' in r)
    iface = builder_ifaces[1]

    def rules(chain: str) -> tuple[str, ...]:
        lines = _sh(netns, ipt, "-t", "filter", "-S", chain).splitlines()
        return tuple(line for line in lines if line.startswith("-A "))

    def set_members(name: str) -> int:
        text = _sh(netns, "ipset", "list", name)
        return len(text.split("Members:\n", 1)[1].splitlines())

    def route_back() -> bool:
        return bool(_sh(netns, "ip", "route", "show", route["dst"], "dev", route["dev"]).strip())

    def proxy_arp() -> bool:
        return _sh(netns, "sysctl", "-n", f"net.ipv4.conf.{iface}.proxy_arp").strip() == "1"

    return [
        (
            f"policy chain flushed ({len(reference.chains[policy]) - 1} rules)",
            [ipt, "-t", "filter", "-F", policy_chain],
            lambda: rules(policy_chain) == reference.chains[policy][1:],
        ),
        (
            "jump FORWARD -> cali-FORWARD deleted",
            [ipt, "-t", "filter", *shlex.split(jump.replace("-A ", "-D ", 1))],
            lambda: rules("FORWARD") == forward[1:],
        ),
        (
            f"IP set emptied ({len(reference.sets[big_set][1])} members)",
            ["ipset", "flush", big_set],
            lambda: set_members(big_set) == len(reference.sets[big_set][1]),
        ),
        (
            "endpoint route deleted",
            ["ip", "route", "del", route["dst"], "dev", route["dev"]],
            route_back,
        ),
        (
            "interface proxy_arp reset",
            ["sysctl", "-w", f"net.ipv4.conf.{iface}.proxy_arp=0"],
            proxy_arp,
        ),
    ]


def tamper_repair(
    args: argparse.Namespace, netns: str, reference: NodeState, ifaces: list[str]
) -> list[list[str]]:
    rows = []
    rng = random.Random(11)
    for what, command, restored in _tampers(netns, args.backend, reference, ifaces):
        times = []
        for _ in range(args.tamper_rounds):
            # Anywhere in the refresh cycle, as an operator's mistake would be.
            time.sleep(rng.uniform(0, args.refresh))
            _sh(netns, *command)
            damaged = time.monotonic()
            assert not restored(), f"{what}: the damage did not take"
            times.append(wait_until(restored, 4 * args.refresh + 60, what) - damaged)
        rows.append(
            [
                what,
                f"{percentile(times, 50):.2f} s",
                f"{max(times):.2f} s",
                f"{args.refresh:g} s",
            ]
        )
        print(f"tamper: {rows[-1]}", flush=True)
    return rows


def _with_policy(
    update: pb.WorkloadEndpointUpdate, policy: pb.PolicyID
) -> pb.WorkloadEndpointUpdate:
    out = pb.WorkloadEndpointUpdate()
    out.CopyFrom(update)
    out.endpoint.tiers.insert(
        0, pb.TierInfo(name="bench", ingress_policies=[policy], default_action="Pass")
    )
    return out


def _allow_port(policy: pb.PolicyID, port: int) -> pb.ActivePolicyUpdate:
    rule = pb.Rule(
        action="allow",
        protocol=pb.Protocol(name="tcp"),
        dst_ports=[pb.PortRange(first=port, last=port)],
    )
    return pb.ActivePolicyUpdate(id=policy, policy=pb.Policy(tier="bench", inbound_rules=[rule]))


def add_endpoint(driver: Driver, update: pb.WorkloadEndpointUpdate) -> float:
    since = driver.mark()
    start = driver.send([update])
    return driver.status(update.id.workload_id, "up", since) - start


def with_default_refresh(msgs: list[Message]) -> list[Message]:
    """The snapshot with the refresh intervals left at their defaults.

    The quarantine figures are about the applies an update causes; a 2 s
    refresh of a node this size keeps the driver busy half the time.
    """
    config = pb.ConfigUpdate()
    assert isinstance(msgs[0], pb.ConfigUpdate)
    config.CopyFrom(msgs[0])
    for key in ("IptablesRefreshInterval", "IpsetsRefreshInterval", "RouteRefreshInterval"):
        del config.config[key]
    return [config, *msgs[1:]]


def quarantine(
    args: argparse.Namespace,
    netns: str,
    current: list[Message],
    endpoints: list[pb.WorkloadEndpointUpdate],
    spares: list[pb.WorkloadEndpointUpdate],
) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {}
    half = len(spares) // 2
    with tempfile.TemporaryDirectory() as tools:
        # The refusing tools from the start: the figures with and without a
        # quarantined object pay the same wrapper around every restore.
        driver = Driver(netns, env=refusing_env(Path(tools), MARKER))
        start = driver.send(with_default_refresh(current))
        figures["restart onto its own state"] = [driver.in_sync(args.timeout) - start]
        figures["new endpoint, nothing quarantined"] = [
            add_endpoint(driver, spare) for spare in spares[:half]
        ]
        victim, bystander = endpoints[0], endpoints[2]
        since = driver.mark()
        start = driver.send(
            [
                _allow_port(REFUSED, int(MARKER)),
                _allow_port(CHANGED, 4000),
                _with_policy(victim, REFUSED),
                _with_policy(bystander, CHANGED),
            ]
        )
        driver.status(victim.id.workload_id, "error", since)
        figures["refused policy quarantined, endpoint reported error"] = [time.monotonic() - start]
        figures["new endpoint while a policy is quarantined"] = [
            add_endpoint(driver, spare) for spare in spares[half:]
        ]
        changes = []
        for port in range(4001, 4001 + half):

            def changed_in_kernel(port: int = port) -> bool:
                save = _sh(netns, f"iptables-{args.backend}-save", "-t", "filter")
                return f"--dports {port}" in save

            start = driver.send([_allow_port(CHANGED, port)])
            changes.append(wait_until(changed_in_kernel, 60, "the changed policy") - start)
        figures["unrelated policy change while a policy is quarantined"] = changes
        since = driver.mark()
        start = driver.send([_allow_port(REFUSED, int(MARKER) + 1)])
        figures["fixed policy leaves quarantine (endpoint up)"] = [
            driver.status(victim.id.workload_id, "up", since) - start
        ]
        err = driver.stop()
    refused = [line for line in err.splitlines() if "refused by the kernel" in line]
    if not refused:
        raise RuntimeError("the refusing tools did not refuse anything:\n" + err[-2000:])
    print("driver said:", refused[0], flush=True)
    return figures


# ---------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_size_arguments(parser)
    parser.add_argument("--backend", default="legacy", choices=["legacy", "nft"])
    parser.add_argument("--refresh", type=float, default=2.0, help="refresh intervals, seconds")
    parser.add_argument("--tamper-rounds", type=int, default=3)
    parser.add_argument(
        "--samples", type=int, default=5, help="endpoint additions and policy changes per figure"
    )
    parser.add_argument(
        "--kill-at",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[0.3, 0.6, 0.9],
        help="fractions of the clean start's time at which the driver is killed",
    )
    parser.add_argument("--timeout", type=float, default=600, help="per step, seconds")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    require_root()
    began = time.perf_counter()
    sizes = Sizes(args.endpoints, args.policies, args.sets, args.members, spare=2 * args.samples)
    bigger = Sizes(
        args.endpoints * 11 // 10, args.policies * 11 // 10, args.sets * 11 // 10, args.members, 0
    )
    builder = NodeBuilder(sizes, args.backend)
    current = snapshot(builder, args.refresh)
    spares = [m for m in builder.additions() if isinstance(m, pb.WorkloadEndpointUpdate)]
    older = snapshot(NodeBuilder(bigger, args.backend, seed=8), args.refresh)
    endpoints = [m for m in current if isinstance(m, pb.WorkloadEndpointUpdate)]
    ifaces = frozenset(e.endpoint.name for e in endpoints)
    links = max(bigger.endpoints, sizes.endpoints + sizes.spare)
    with sigterm_unwinds(), Topology() as topo, veth_node(topo, "cln", links) as (netns, _):
        driver = Driver(netns)
        start = driver.send(current)
        clean_s = driver.in_sync(args.timeout) - start
        reference = read_state(netns, args.backend, ifaces)
        chains, sets = ours(reference)
        print(f"clean start: {clean_s:.2f} s, {chains} chains, {sets} sets", flush=True)
        tamper_rows = tamper_repair(args, netns, reference, sorted(ifaces))
        driver.stop()
        quarantined = quarantine(args, netns, current, endpoints, spares)
        crash_rows = crash_and_restart(
            topo,
            args,
            older=older,
            current=current,
            clean_s=clean_s,
            reference=reference,
            links=links,
            ifaces=ifaces,
        )

    print(
        f"\n# reliability, {args.backend}: {sizes.endpoints} endpoints, {sizes.policies}"
        f" policies, {sizes.sets} IP sets, {sizes.members} members"
    )
    print(f"# {machine()}")
    print(f"# total {time.perf_counter() - began:.0f} s\n")
    print(f"clean start (reference): {clean_s:.2f} s, {chains} of our chains, {sets} of our sets\n")
    print(
        markdown_table(
            [
                "SIGKILL at",
                "ours in the kernel then",
                "restart to in sync",
                "vs clean start",
                "end state vs clean start",
            ],
            crash_rows,
        )
    )
    print()
    print(markdown_table(["tampered", "repaired p50", "max", "refresh interval"], tamper_rows))
    print()
    rows = []
    for what, samples in quarantined.items():
        worst = max(samples)
        goal = ""
        if "while a policy is quarantined" in what:
            goal = f"goal < {GOAL_UNRELATED_S:g} s, ratio {worst / GOAL_UNRELATED_S:.2f}"
        p50 = f"{percentile(samples, 50) * 1000:.0f} ms" if len(samples) > 1 else ""
        rows.append([what, str(len(samples)), p50, f"{worst * 1000:.0f} ms", goal])
    print(markdown_table(["refusing restore tools", "n", "p50", "max", "goal (max)"], rows))


if __name__ == "__main__":
    main()
