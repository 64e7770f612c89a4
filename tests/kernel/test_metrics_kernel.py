"""The Linux platform's metrics and object errors against the real kernel.

The driver side runs in the node's namespace, as a node runs it: a child
process (:func:`child_main`) holding a loop over a :class:`LinuxPlatform`
with metrics bound and the policy counters registered, answering the
test's requests (a scrape, the object errors) on its stdin. The test sends
real packets between the pods and reads what the kernel counted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

import pytest
from google.protobuf.message import Message

from dataplane.core.platform import ObjectError
from dataplane.linux.ipsets.names import is_owned
from dataplane.linux.ipsets.save import parse_save as parse_ipset_save
from dataplane.linux.iptables.chains import parse_save
from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.topology import Topology
from tests.conftest import REPO
from tests.kernel import scenario
from tests.kernel.cluster import Cluster
from tests.kernel.marks import requires_root
from tests.kernel.refusing_tools import (
    MARKER,
    refused_policy,
    refusing_env,
    using_refused_policy,
)
from tests.linux.metric_samples import parsed

pytestmark = [requires_root, pytest.mark.slow, pytest.mark.own_backend]

BIG_SET = "s:big"
LABELS = ("tier", "policy", "direction", "rule", "action")
BUILTIN = ("INPUT", "FORWARD", "OUTPUT", "PREROUTING", "POSTROUTING")


def _refused_objects(db_iface: str) -> list[Message]:
    """A policy the refusing tools refuse, used by db-1; a set over MaxIpsetSize."""
    return [
        refused_policy(),
        using_refused_policy(db_iface),
        pb.IPSetUpdate(id=BIG_SET, members=["10.9.0.1", "10.9.0.2", "10.9.0.3"]),
    ]


def child_main() -> None:  # pragma: no cover - runs in the child
    """The driver side (``python -c``, in the node's namespace); argv[1] is its spec."""
    from prometheus_client import generate_latest  # noqa: PLC0415

    from dataplane.core.loop import Dataplane  # noqa: PLC0415
    from dataplane.embed import ThreadedDataplane  # noqa: PLC0415
    from dataplane.linux.platform import LinuxPlatform  # noqa: PLC0415
    from dataplane.ops.metrics import Metrics  # noqa: PLC0415

    spec = json.loads(sys.argv[1])
    platform = LinuxPlatform(sysctl_state=Path(spec["sysctl_state"]))
    metrics = Metrics(process=False)
    platform.bind_metrics(metrics)
    metrics.register(platform.policy_counters(min_interval=0.0, background=False))
    extra = _refused_objects(spec["ifaces"]["db-1"]) if spec["refuse"] else []
    msgs = scenario.node_messages(spec["ifaces"], extra=extra, **spec["config"])
    with ThreadedDataplane(Dataplane(platform)) as dp:
        for msg in msgs:
            dp.send_message(msg)
        while True:
            envelope = dp.recv_message(timeout=60)
            if envelope is None:
                raise SystemExit("the loop stopped before DataplaneInSync")
            if envelope.HasField("dataplane_in_sync"):
                break

        def reply(value: object) -> None:
            sys.stdout.write(json.dumps(value) + "\n")
            sys.stdout.flush()

        reply("ready")
        for line in sys.stdin:
            request = line.strip()
            if request == "scrape":
                reply(generate_latest(metrics.registry).decode())
            elif request == "errors":
                reply([asdict(e) for e in platform.object_errors()])
            else:
                break


class Driver:
    """The parent's end of :func:`child_main`."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def _ask(self, request: str) -> Any:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(request + "\n")
        stdin.flush()
        return _answer(stdout)

    def scrape(self) -> str:
        text = self._ask("scrape")
        assert isinstance(text, str)
        return text

    def object_errors(self) -> list[ObjectError]:
        return [ObjectError(**e) for e in self._ask("errors")]


def _answer(stdout: IO[str]) -> Any:
    line = stdout.readline()
    if not line:
        raise AssertionError("the driver child ended (its stderr is in the test's output)")
    return json.loads(line)


@contextmanager
def driver(
    cluster: Cluster, *, refuse: bool = False, env: dict[str, str] | None = None, **config: str
) -> Iterator[Driver]:
    spec = {
        "ifaces": cluster.ifaces,
        "sysctl_state": str(cluster.sysctl_state),
        "refuse": refuse,
        "config": {"IptablesBackend": "nft", **config},
    }
    code = "from tests.kernel.test_metrics_kernel import child_main; child_main()"
    proc = subprocess.Popen(
        ["ip", "netns", "exec", cluster.node.netns, sys.executable, "-c", code, json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )
    try:
        assert proc.stdout is not None
        assert _answer(proc.stdout) == "ready"
        yield Driver(proc)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # the child closes the loop's input and ends
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        cluster.sysctl_state.unlink(missing_ok=True)


def _kernel_tables(netns: str) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(version, table) -> (our chains, their rules, our rules in built-in chains)."""
    out = {}
    for version, tool in (("4", "iptables-nft-save"), ("6", "ip6tables-nft-save")):
        saved = subprocess.run(
            ["ip", "netns", "exec", netns, tool], capture_output=True, text=True, check=True
        ).stdout
        for name, table in parse_save(saved).items():
            ours = [c for c in table.chains.values() if c.name.startswith("cali-")]
            hooks = sum(
                1 for c in table.chains.values() if c.name in BUILTIN for h in c.hashes if h
            )
            if ours:
                out[(version, name)] = (len(ours), sum(len(c.lines) for c in ours), hooks)
    return out


def _nft_tables(
    netns: str,
) -> tuple[dict[tuple[str, str], tuple[int, int]], dict[tuple[str], float]]:
    """On nftables: (version, iptables table) -> (our chains, their rules), and
    our sets per version, from our table per family."""
    tables: dict[tuple[str, str], tuple[int, int]] = {}
    sets: dict[tuple[str], float] = {}
    for version, family in (("4", "ip"), ("6", "ip6")):
        listed = subprocess.run(
            ["ip", "netns", "exec", netns, "nft", "list", "table", family, "cali"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        chain: tuple[str, str] | None = None
        for line in listed.splitlines():
            if line.startswith("\tset "):
                # Felix's IP sets (cali4..., cali6...), not the endpoints'
                # dispatch data (wl-sources).
                if line.split()[1].startswith("cali"):
                    sets[(version,)] = sets.get((version,), 0.0) + 1
                chain = None
            elif line.startswith("\tchain "):
                table, _, name = line.split()[1].partition("-")
                chain = (version, table) if name.startswith("cali-") else None
                if chain is not None:
                    chains, rules = tables.get(chain, (0, 0))
                    tables[chain] = (chains + 1, rules)
            elif chain is not None and line.startswith("\t\t") and "cali:" in line:
                chains, rules = tables[chain]
                tables[chain] = (chains, rules + 1)
    return tables, sets


def _kernel_sets(netns: str) -> dict[tuple[str], float]:
    saved = subprocess.run(
        ["ip", "netns", "exec", netns, "ipset", "save"], capture_output=True, text=True, check=True
    ).stdout
    families: dict[tuple[str], float] = {}
    for kernel_set in parse_ipset_save(saved, is_owned).values():
        version = ("4",) if kernel_set.meta.family == "inet" else ("6",)
        families[version] = families.get(version, 0.0) + 1
    return families


@pytest.mark.parametrize("backend", ["iptables", "nftables"])
def test_rule_counters_name_the_rules_that_dropped_and_allowed_real_packets(
    topology: Topology, backend: str
) -> None:
    cluster = Cluster(topology)
    mode = "Enabled" if backend == "nftables" else "Disabled"
    web1, web2, api1 = (cluster.pods[p] for p in ("web-1", "web-2", "api-1"))
    deny = ("security", "security.guard", "inbound", "0", "deny")
    allow_in = ("default", "NetworkPolicy:backend/allow-web-to-api", "inbound", "0", "allow")
    allow_out = ("default", "NetworkPolicy:frontend/web-egress", "outbound", "0", "allow")
    with driver(cluster, NFTablesMode=mode) as node:
        before = parsed(node.scrape(), "dataplane_policy_packets_total", LABELS)
        # web-2 is on the blocklist: the security tier drops its SYN at
        # api-1's ingress (one SYN each: the first retransmission is at 1 s).
        for _ in range(3):
            assert not web2.can_connect("tcp", api1.ipv4, 8080, timeout=0.5)
        # web-1 is allowed: only the SYN meets policy, the rest is established.
        for _ in range(2):
            assert web1.can_connect("tcp", api1.ipv4, 8080, timeout=3.0)
        text = node.scrape()
    after = parsed(text, "dataplane_policy_packets_total", LABELS)
    assert {k: after[k] - before.get(k, 0.0) for k in (deny, allow_in, allow_out)} == {
        deny: 3.0,
        allow_in: 2.0,
        allow_out: 5.0,  # both web pods' SYNs leave through web-egress
    }
    if backend == "nftables":
        # Felix's gauges hold what our table per family holds, by iptables table.
        held, sets = _nft_tables(cluster.node.netns)
        assert {
            "chains": parsed(text, "felix_iptables_chains", ("ip_version", "table")),
            "rules": parsed(text, "felix_iptables_rules", ("ip_version", "table")),
            "sets": parsed(text, "felix_ipsets_calico", ("ip_version",)),
            "routes": parsed(text, "dataplane_route_writes_total"),
        } == {
            "chains": {key: float(chains) for key, (chains, _) in held.items()},
            "rules": {key: float(rules) for key, (_, rules) in held.items()},
            "sets": sets,
            "routes": {(): 2.0 * len(cluster.pods)},
        }
        return
    # Felix's gauges hold what the kernel holds; the first restore of each
    # table declared each chain and wrote each rule and hook once.
    kernel = _kernel_tables(cluster.node.netns)
    assert {
        "chains": parsed(text, "felix_iptables_chains", ("ip_version", "table")),
        "rules": parsed(text, "felix_iptables_rules", ("ip_version", "table")),
        "lines": parsed(text, "felix_iptables_lines_executed_total", ("ip_version", "table")),
        "sets": parsed(text, "felix_ipsets_calico", ("ip_version",)),
        "errors": [
            parsed(text, f"felix_{name}_errors_total")
            for name in ("iptables_restore", "iptables_save", "ipset")
        ],
        # A /32 and a /128 per pod.
        "routes": parsed(text, "dataplane_route_writes_total"),
    } == {
        "chains": {key: float(chains) for key, (chains, _, _) in kernel.items()},
        "rules": {key: float(rules) for key, (_, rules, _) in kernel.items()},
        "lines": {key: float(sum(counts)) for key, counts in kernel.items()},
        "sets": _kernel_sets(cluster.node.netns),
        "errors": [{(): 0.0}] * 3,
        "routes": {(): 2.0 * len(cluster.pods)},
    }
    assert parsed(text, "dataplane_sysctl_writes_total")[()] > 0


def test_object_errors_name_what_the_kernel_refused(topology: Topology, tmp_path: Path) -> None:
    cluster = Cluster(topology)
    env = refusing_env(tmp_path, MARKER)
    with driver(cluster, refuse=True, env=env, MaxIpsetSize="2") as node:
        errors = node.object_errors()
        text = node.scrape()
    (big, policy) = errors
    assert (big.kind, big.id, policy) == (
        "ipset",
        BIG_SET,
        # Refused in both IP versions (and directions): one object.
        ObjectError("policy", "refuse-me", "iptables-nft-restore: refused by the test hook"),
    )
    # The kernel's words, as logged.
    assert big.reason.startswith(f"ipset restore (update of set '{BIG_SET}') failed"), big.reason
    assert "full" in big.reason, big.reason
    restore_errors, ipset_errors = (
        parsed(text, f"felix_{name}_errors_total")[()] for name in ("iptables_restore", "ipset")
    )
    # Each IP version's filter restore, and for the set the batch, then the
    # set alone; a quarantine retry falling due (1 s backoff) adds more.
    assert restore_errors >= 2
    assert ipset_errors >= 2
