"""The demo (``make demo``): program a throwaway node from the example log, then prove it.

As root on Linux with ``ip netns``, iptables and ipset, it

1. builds a node and the example's seven pods in network namespaces
   (``testbed/topology.py``), with the same interface names and
   addresses as ``examples/demo_node.py``, and servers on the ports the
   policies talk about;
2. replays ``examples/demo-node.log`` with the Linux platform inside the
   node namespace, so the node's kernel gets real chains, IP sets and routes
   (iptables and ipset; with ``--nftables``, native nftables);
3. sends real packets pod to pod (and to hosts beyond the node's uplink),
   all at once, and prints the measured matrix under the matrix expected
   from the policies; exits 1 if any cell differs.

The namespaces are always removed, on errors and Ctrl-C too. Anywhere else
it replays the log with the in-memory sim platform and prints that state.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.demo_node import LOG_PATH, NAMESPACES, PODS, SCALE_UP
from testbed.topology import Namespace, Node, ProbeResult, Topology, sigterm_unwinds
from testbed.topology import kernel_unavailable as netns_unavailable

REPO = LOG_PATH.parent.parent

Family = Literal[4, 6]
FAMILIES: tuple[Family, ...] = (4, 6)

# An allowed probe returns as soon as it is answered; a denied one always
# costs its whole timeout, and they all run at once.
ALLOW_TIMEOUT = 2.5
DENY_TIMEOUT = 0.5
REPLAY_TIMEOUT = 60.0
KERNEL_TOOLS = ("ip", "iptables", "iptables-save", "iptables-restore", "ip6tables", "ipset")

POD_TCP_PORTS = (80, 443, 5432, 8080, 9090, 9091)
POD_UDP_PORTS = (53,)
# Extra addresses on the node's uplink host, so egress rules about places
# outside the cluster can be probed without leaving our namespaces.
KUBE_DNS = "10.96.0.10"  # the one member of the kube-dns selector set
BLOCKED: dict[Family, str] = {4: "203.0.113.10", 6: "2001:db8:bad::10"}  # on the blocklist
PRIVATE_NETS = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "fd00::/8")]

# web-3 joins after InSync, in the same log. Rows: namespace by namespace.
ALL_PODS = sorted([*PODS, SCALE_UP], key=lambda p: (NAMESPACES.index(p.namespace), p.name))
APP = {pod.name: pod.app for pod in ALL_PODS}


@dataclass(frozen=True)
class Column:
    """One destination of the matrix: a pod or uplink host, and what is sent there."""

    dest: str  # a pod name, or "dns", "inet", "block" (addresses on the uplink host)
    head: str  # the column header (two lines: dest, then port)
    proto: Literal["tcp", "udp", "icmp"]
    port: int = 0

    @property
    def port_label(self) -> str:
        if self.proto == "icmp":
            return "icmp"
        return f"{self.port}/udp" if self.proto == "udp" else str(self.port)


COLUMNS = (
    Column("api-1", "api-1", "tcp", 8080),  # api's named port "http"
    Column("api-2", "api-2", "tcp", 9091),  # the monitoring scrape range 9090-9091
    Column("api-1", "api-1", "icmp"),
    Column("db-1", "db-1", "tcp", 5432),
    Column("web-3", "web-3", "tcp", 80),  # the pod added after InSync
    Column("prometheus-1", "prom-1", "icmp"),
    Column("dns", "dns", "udp", 53),
    Column("inet", "inet", "tcp", 443),
    Column("inet", "inet", "tcp", 80),
    Column("block", "block", "tcp", 443),
)

LEGEND = """\
dns = {dns}, the kube-dns set's member; inet = {inet4} / {inet6};
block = {block4} / {block6}, in the security tier's blocklist: all three
live on the node's uplink host. n/a = no such address; * = measured differs from expected."""

WHY = """\
why: the security tier denies the blocklist both ways, then passes. In the default tier
  (Deny) web may only send DNS to kube-dns, http (8080) to api, and 443 outside 10.0.0.0/8
  and fd00::/8 (so not to the uplink host's IPv6 address, {inet6}); api accepts only
  http from web, 9090-9091 from monitoring and ICMPv4 echo from web (which web's egress
  policy never lets out); db accepts nothing. Everything else falls to the allow-all
  namespace profiles."""


# --- the expected matrix, derived by hand from examples/demo_node.py's policies --------------


def _private(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return any(ip in net for net in PRIVATE_NETS if net.version == ip.version)


def egress_allows(src: str, col: Column, dst_address: str) -> bool:
    """What ``src``'s own (outbound) policy says."""
    # Tier security (every pod): deny-blocklist denies the blocklist, then passes.
    if col.dest == "block":
        return False
    # Tier default has egress policies only for web; for everyone else the tier
    # is skipped and the kns.<namespace> profile allows everything.
    if APP[src] != "web":
        return True
    # frontend-egress; whatever it does not allow meets the tier's Deny.
    if col.proto == "udp" and col.port == 53:
        return dst_address == KUBE_DNS
    if col.proto == "tcp" and col.port == 8080 and APP.get(col.dest) == "api":
        return True  # to the api set, on the named port http
    return col.proto == "tcp" and col.port == 443 and not _private(dst_address)


def ingress_allows(src: str, col: Column, family: Family) -> bool:
    """What the destination's inbound policy says (uplink hosts have none)."""
    # Tier security: deny from the blocklist (no pod is on it), then pass.
    app = APP.get(col.dest)
    if app == "api":
        # allow-web-to-api and allow-monitoring; anything else: end-of-tier Deny.
        if col.proto == "tcp" and col.port == 8080:
            return APP[src] == "web"
        if col.proto == "icmp":
            return APP[src] == "web" and family == 4
        return col.proto == "tcp" and 9090 <= col.port <= 9091 and APP[src] == "prometheus"
    # db: db-default-deny has no rules, so end-of-tier Deny. web and prometheus:
    # no default-tier ingress policy, so the profile.
    return app != "db"


def expected(src: str, col: Column, family: Family, dst_address: str) -> bool:
    return egress_allows(src, col, dst_address) and ingress_allows(src, col, family)


# --- fallback: the in-memory platform --------------------------------------------------------


def kernel_unavailable(nftables: bool = False) -> str | None:
    """Why this machine cannot run the kernel demo (on native nftables:
    ``nftables``), or None if it can."""
    if sys.platform != "linux":
        return f"not Linux ({sys.platform})"
    # Root first, as before: on a user's machine that is the reason to give.
    why = netns_unavailable()
    if why is not None:
        return why
    tools = (*KERNEL_TOOLS, "nft") if nftables else KERNEL_TOOLS
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    return None


def replay_argv(platform: str, nftables: bool = False) -> list[str]:
    return [
        sys.executable,
        str(REPO / "driver.py"),
        "--platform",
        platform,
        *(["--nftables-mode", "enabled"] if nftables else []),
        "replay",
        str(LOG_PATH),
    ]


def run_sim(reason: str) -> int:
    print(f"{reason}: showing the in-memory (sim) platform's state instead of programming a kernel")
    print(f"$ driver.py --platform sim replay {LOG_PATH.relative_to(REPO)}", flush=True)
    # In this process: the same code as driver.py, and no interpreter to exec
    # (a venv's interpreter may not be executable by the user we run as).
    from dataplane.cli import main as driver_main  # noqa: PLC0415

    return driver_main(["--platform", "sim", "--log-level", "WARNING", "replay", str(LOG_PATH)])


# --- the kernel demo -------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    src: str
    col: Column
    family: Family
    address: str
    expect: bool


def summarize_dump(dump: str, ipsets: int) -> list[str]:
    """A few lines about what the replay programmed (the dump itself is long)."""
    lines = dump.splitlines()
    # iptables: "*filter (IPv4)" per table; nftables: "table ip cali" per family.
    tables = [line[1:] for line in lines if line.startswith("*")]
    tables += [line.removeprefix("table ") for line in lines if line.startswith("table ")]
    chains = sum(1 for line in lines if line.startswith("  ") and not line.startswith("   "))
    rules = sum(1 for line in lines if line.startswith("    "))
    routes = 0
    if "routes (ours):" in lines:
        routes = len(lines) - lines.index("routes (ours):") - 1
        chains -= routes
    backend = next((line for line in lines if line.startswith("linux platform")), "")
    return [
        lines[0] if lines else "(no output)",
        f"{backend}: {len(tables)} tables ({', '.join(sorted({t.split()[0] for t in tables}))}"
        f" for IPv4 and IPv6), {chains} chains, {rules} rules; {ipsets} IP sets;"
        f" {routes} routes to pods",
    ]


def build(node: Node) -> dict[str, Namespace]:
    """The example's pods and servers, plus the uplink host's extra addresses."""
    pods: dict[str, Namespace] = {}
    for spec in ALL_PODS:
        pods[spec.name] = node.add_pod(spec.name, spec.ipv4, spec.ipv6, iface=spec.iface)
    external = node.external
    external.ip_batch(
        f"addr add {KUBE_DNS}/32 dev lo",
        f"addr add {BLOCKED[4]}/32 dev lo",
        f"addr add {BLOCKED[6]}/128 dev lo nodad",
    )

    def serve(ns: Namespace, tcp: Sequence[int], udp: Sequence[int]) -> None:
        for port in tcp:
            ns.listen("tcp", port)
        for port in udp:
            ns.listen("udp", port)

    # Each agent is a Python process: start them side by side.
    with ThreadPoolExecutor(max_workers=len(pods) + 1) as pool:
        jobs = [pool.submit(serve, pod, POD_TCP_PORTS, POD_UDP_PORTS) for pod in pods.values()]
        jobs.append(pool.submit(serve, external, (80, 443), (53,)))
        for job in jobs:
            job.result()
    return pods


def addresses(col: Column, pods: Mapping[str, Namespace], node: Node) -> dict[Family, str]:
    if col.dest in pods:
        pod = pods[col.dest]
        return {family: pod.address(family) for family in FAMILIES}
    if col.dest == "dns":
        return {4: KUBE_DNS}
    if col.dest == "block":
        return dict(BLOCKED)
    return {family: node.external.address(family) for family in FAMILIES}


def probe(src: Namespace, cell: Cell) -> ProbeResult:
    timeout = ALLOW_TIMEOUT if cell.expect else DENY_TIMEOUT
    if cell.col.proto == "icmp":
        return src.icmp(cell.address, timeout)
    return src.connect(cell.col.proto, cell.address, cell.col.port, timeout)


def render(
    family: Family, cells: Mapping[tuple[str, int], Cell], measured: Mapping[Cell, bool]
) -> list[str]:
    """Expected and measured matrices for one family, one above the other."""
    width = max(len(pod.name) for pod in ALL_PODS) + 1
    cols = [max(len(c.head), len(c.port_label), len("allow*")) + 1 for c in COLUMNS]

    def row(label: str, values: Sequence[str]) -> str:
        return (
            label.ljust(width) + "".join(v.ljust(w) for v, w in zip(values, cols, strict=True))
        ).rstrip()

    def verdict(src: str, index: int, value: Callable[[Cell], bool]) -> str:
        col = COLUMNS[index]
        if src == col.dest:
            return "self"
        cell = cells.get((src, index))
        if cell is None:
            return "n/a"
        text = "allow" if value(cell) else "deny"
        return text + ("*" if measured[cell] != cell.expect else "")

    out = [row(f"IPv{family}", [c.head for c in COLUMNS]), row("", [c.port_label for c in COLUMNS])]
    for title, value in (("expected", lambda c: c.expect), ("measured", measured.__getitem__)):
        out.append(title)
        for pod in (spec.name for spec in ALL_PODS):
            out.append(row(pod, [verdict(pod, i, value) for i in range(len(COLUMNS))]))
    return out


def run_kernel(nftables: bool) -> int:
    started = time.monotonic()
    with Topology() as topo:
        node = topo.add_node("node-1")
        pods = build(node)
        print(
            f"node: namespace {node.netns}, {len(pods)} pods, uplink host"
            f" {node.external.netns}; built in {time.monotonic() - started:.1f} s"
        )
        if not program(node, nftables):
            return 1
        cells = plan(pods, node)
        flat = [cell for by_family in cells.values() for cell in by_family.values()]
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(flat)) as pool:
            results = list(pool.map(lambda c: probe(pods[c.src], c), flat))
        print(
            f"probes: {len(flat)} real connections and pings, in parallel, in"
            f" {time.monotonic() - t0:.1f} s\n"
        )
        legend = LEGEND.format(
            dns=KUBE_DNS,
            inet4=node.external.address(4),
            inet6=node.external.address(6),
            block4=BLOCKED[4],
            block6=BLOCKED[6],
        )
        legend += "\n\n" + WHY.format(inet6=node.external.address(6))
    # The namespaces are gone; what is left is reporting.
    measured = {cell: result.ok for cell, result in zip(flat, results, strict=True)}
    for family in FAMILIES:
        by_position = {key: fam[family] for key, fam in cells.items() if family in fam}
        print("\n".join(render(family, by_position, measured)) + "\n")
    print(legend + "\n")
    wrong = [(c, r) for c, r in zip(flat, results, strict=True) if r.ok != c.expect]
    for cell, result in wrong:
        what = cell.col.proto if cell.col.proto == "icmp" else f"{cell.col.proto}/{cell.col.port}"
        print(
            f"MISMATCH {cell.src} -> {cell.col.dest} ({cell.address}) {what}:"
            f" expected {_word(cell.expect)}, measured {_word(result.ok)}"
            f" ({result.error or result.reply})"
        )
    print(f"done in {time.monotonic() - started:.1f} s; namespaces removed")
    print(f"matrix: {len(flat) - len(wrong)}/{len(flat)} cells as expected")
    return 1 if wrong else 0


def _word(allowed: bool) -> str:
    return "allow" if allowed else "deny"


def program(node: Node, nftables: bool) -> bool:
    """Replay the log with the Linux platform inside the node; print a summary."""
    shown = os.path.relpath(sys.executable) if sys.executable.startswith(str(REPO)) else "python"
    flag = " --nftables-mode enabled" if nftables else ""
    print(
        f"$ ip netns exec {node.netns} {shown} driver.py --platform linux{flag}"
        f" replay {LOG_PATH.relative_to(REPO)}"
    )
    t0 = time.monotonic()
    replay = subprocess.run(
        ["ip", "netns", "exec", node.netns, *replay_argv("linux", nftables)],
        # The demo's node is a throwaway namespace: no pod MTU file on the host.
        env={**os.environ, "DATAPLANE_MTU_FILE": "none"},
        capture_output=True,
        text=True,
        timeout=REPLAY_TIMEOUT,
        check=False,
        start_new_session=True,  # Ctrl-C is ours to handle: run() kills it, quietly
    )
    if replay.returncode != 0:
        print(replay.stdout + replay.stderr, end="")
        print(f"replay failed (exit {replay.returncode})")
        return False
    if nftables:  # native sets, one per set and family, beside our rules
        listed = [node.run("nft", "list", "table", f, "cali").stdout for f in ("ip", "ip6")]
        ipsets = sum(line.startswith("\tset ") for text in listed for line in text.splitlines())
    else:
        ipsets = len(node.run("ipset", "list", "-n").stdout.split())
    for line in summarize_dump(replay.stdout, ipsets):
        print(f"  {line}")
    print(f"  programmed in {time.monotonic() - t0:.1f} s")
    return True


def plan(pods: Mapping[str, Namespace], node: Node) -> dict[tuple[str, int], dict[Family, Cell]]:
    """Every (source, column) pair, per family, with its expected verdict."""
    cells: dict[tuple[str, int], dict[Family, Cell]] = {}
    for index, col in enumerate(COLUMNS):
        for family, address in addresses(col, pods, node).items():
            for src in (spec.name for spec in ALL_PODS):
                if src != col.dest:  # a pod talking to itself never meets the node
                    want = expected(src, col, family, address)
                    cells.setdefault((src, index), {})[family] = Cell(
                        src, col, family, address, want
                    )
    return cells


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="program a throwaway node, then probe it")
    parser.add_argument(
        "--nftables",
        action="store_true",
        help="program native nftables instead of iptables and ipset (NFTablesMode=Enabled)",
    )
    args = parser.parse_args(argv)
    reason = kernel_unavailable(args.nftables)
    if reason is not None:
        return run_sim(reason)
    backend = "native nftables" if args.nftables else "iptables and ipset"
    print(
        f"dataplane demo: a node programmed from {LOG_PATH.relative_to(REPO)} ({backend}),"
        " then probed"
    )
    try:
        with sigterm_unwinds():
            return run_kernel(args.nftables)
    except KeyboardInterrupt:
        print("\ninterrupted; the demo's namespaces were removed", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
