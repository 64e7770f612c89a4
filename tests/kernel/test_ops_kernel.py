"""Health against the real kernel: a refused write, a hanging restore tool.

The driver runs in the node's namespace with ``--listen``; the probes run
there too, as a kubelet exec probe would (``dataplane-driver health``).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testbed.topology import Topology
from tests.felix_harness import REPO, FelixHarness
from tests.kernel import scenario
from tests.kernel.cluster import Cluster, Probe
from tests.kernel.marks import requires_root
from tests.kernel.refusing_tools import (
    MARKER,
    refused_policy,
    refusing_env,
    using_refused_policy,
)
from tests.waiting import eventually

pytestmark = [requires_root, pytest.mark.slow]

PORT = 19321  # inside the node's own namespace: nothing else listens there


def _in_node(netns: str) -> list[str]:
    return ["ip", "netns", "exec", netns, sys.executable, "-m", "dataplane"]


def _probe(netns: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_in_node(netns), "health", "--address", f"127.0.0.1:{PORT}", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        timeout=30,
    )


def _metrics(netns: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A scrape of the driver's /metrics, from inside the node as Prometheus's agent would."""
    fetch = f"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{PORT}/metrics').read().decode())"
    done = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, "-c", fetch],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(done.stdout)
        for s in family.samples
    }


def test_readiness_follows_the_kernel_refusing_and_accepting(
    topology: Topology, tmp_path: Path, kernel_backend: str
) -> None:
    cluster = Cluster(topology)
    netns = cluster.node.netns
    felix = FelixHarness(
        "--platform",
        "linux",
        "--listen",
        f"127.0.0.1:{PORT}",
        netns=netns,
        env=refusing_env(tmp_path, MARKER),
    )
    felix.drain()
    try:
        eventually(lambda: _probe(netns).returncode == 0, 30.0, "never live")
        before = _probe(netns, "--ready")
        assert before.returncode == 1
        assert "in-sync: waiting for InSync" in before.stdout
        felix.send(
            *scenario.node_messages(
                cluster.ifaces,
                extra=[refused_policy(int(MARKER)), using_refused_policy(cluster.ifaces["db-1"])],
                IptablesBackend="nft",
            )
        )
        # Programmed, but one policy refused: not ready, and it says which.
        eventually(
            lambda: "quarantine: policy refuse-me refused" in _probe(netns, "--ready").stdout,
            60.0,
            "never unready for the refused policy",
        )
        assert _probe(netns, "--ready").returncode == 1
        cluster.wait_for(Probe("web-1", "api-1", "tcp", 8080, 4, True))
        # The refusal shows in the metrics too, beside the work done.
        samples = _metrics(netns)
        assert samples[("dataplane_quarantined_objects", (("kind", "policy"),))] == 1
        assert samples[("dataplane_objects", (("kind", "policy"), ("status", "error")))] == 1
        if kernel_backend == "iptables":
            assert samples[("felix_iptables_restore_calls_total", ())] >= 8
            assert samples[("felix_iptables_restore_errors_total", ())] >= 1
        latency = (("kind", "workload_endpoint"),)
        assert (
            samples[("dataplane_network_programming_duration_seconds_count", latency)]
            == len(cluster.ifaces) + 1
        )  # db-1's update came twice: its own and with the refused policy

        # The kernel's own counters of the probe's packets: read in the
        # background once scraped, so they show on a later scrape.
        def allowed_packets() -> float:
            return sum(
                value
                for (name, labels), value in _metrics(netns).items()
                if name == "dataplane_policy_packets_total" and ("action", "allow") in labels
            )

        eventually(lambda: allowed_packets() > 0, 30.0, "the probe's packets were never counted")
        # show names the refused policy, with the kernel's reason.
        shown = subprocess.run(
            [*_in_node(netns), "show", "--address", f"127.0.0.1:{PORT}", "--json"],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=True,
            timeout=30,
        )
        errors = [o for o in json.loads(shown.stdout)["objects"] if o["status"] == "error"]
        assert [(o["kind"], o["id"]) for o in errors] == [("policy", "refuse-me")]
        assert "refused by the test hook" in errors[0]["error"]
        # The kernel accepts the fixed policy: ready again.
        felix.send(refused_policy(7778))
        eventually(lambda: _probe(netns, "--ready").returncode == 0, 30.0, "never ready again")
    finally:
        felix.close_input()
        felix.wait()


# While the gate (a FIFO) is there, a tool opens it and reads until every
# writer has closed it: the test holds it open for writing, and lets every
# tool waiting on it go at once by removing it and closing its end.
_HANGING = """#!{python}
import os, subprocess, sys
data = sys.stdin.buffer.read()
try:
    gate = os.open("{flag}", os.O_RDONLY)
except FileNotFoundError:
    pass
else:
    while os.read(gate, 1):
        pass
sys.exit(subprocess.run(["{real}", *sys.argv[1:]], input=data).returncode)
"""


class Gate:
    """A FIFO the hanging tools wait on while it is shut (see ``_HANGING``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._held: int | None = None

    def shut(self) -> None:
        os.mkfifo(self.path)
        # Read-write: opening does not wait for a reader, and tools that
        # open it for reading do not wait for a writer.
        self._held = os.open(self.path, os.O_RDWR)

    def open(self) -> None:
        """Let every waiting tool go; tools started after never wait."""
        self.path.unlink(missing_ok=True)
        if self._held is not None:
            os.close(self._held)
            self._held = None


def _hanging_env(directory: Path, flag: Path) -> dict[str, str]:
    """Rule tools (iptables-nft's restores, nft) that hang while the gate
    at ``flag`` is shut, then do their work."""
    for tool in ("iptables-nft-restore", "ip6tables-nft-restore", "nft"):
        real = shutil.which(tool)
        assert real is not None
        wrapper = directory / tool
        wrapper.write_text(_HANGING.format(python=sys.executable, flag=flag, real=real))
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ)
    env["PATH"] = f"{directory}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    return env


def test_liveness_fails_while_a_restore_tool_hangs_and_recovers(
    topology: Topology, tmp_path: Path
) -> None:
    cluster = Cluster(topology)
    netns = cluster.node.netns
    gate = Gate(tmp_path / "hang")
    felix = FelixHarness(
        "--platform",
        "linux",
        "--listen",
        f"127.0.0.1:{PORT}",
        "--liveness-deadline",
        "1",
        netns=netns,
        env=_hanging_env(tmp_path, gate.path),
    )
    felix.drain()
    try:
        felix.send(*scenario.node_messages(cluster.ifaces, IptablesBackend="nft"))
        eventually(lambda: _probe(netns, "--ready").returncode == 0, 60.0, "never ready")
        gate.shut()
        felix.send(refused_policy(8081))  # any change: the next apply runs a restore
        eventually(lambda: _probe(netns).returncode == 1, 30.0, "never not live")
        stuck = _probe(netns)
        assert "main-loop: busy apply for" in stuck.stdout
        assert "over the liveness deadline of 1s" in stuck.stdout
        gate.open()
        eventually(lambda: _probe(netns).returncode == 0, 30.0, "never live again")
        eventually(lambda: _probe(netns, "--ready").returncode == 0, 30.0, "never ready again")
    finally:
        gate.open()
        felix.close_input()
        felix.wait()
