"""A node with the scenario's pods, their servers, and the driver inside it."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import Message

from testbed.topology import Namespace, Node, Pod, Topology
from tests.felix_harness import FelixHarness
from tests.kernel import scenario

ALLOW_TIMEOUT = 3.0  # generous: an allowed probe returns as soon as it succeeds
DENY_TIMEOUT = 0.7  # a denied probe always costs its full timeout

TCP_PORTS = (80, 6666, 8080, 9090, 9091, 5432)
UDP_PORTS = (53, 5353)


@dataclass(frozen=True)
class Probe:
    src: str
    dst: str
    proto: str  # tcp, udp or icmp
    port: int = 0
    family: int = 4
    expect: bool = True

    def __str__(self) -> str:
        what = self.proto if self.proto == "icmp" else f"{self.proto}/{self.port}"
        return f"{self.src} -> {self.dst} {what} v{self.family}: expected {self.expect}"


class Cluster:
    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.node: Node = topology.add_node()
        # Never the host's default (/var/lib/dataplane): a record there from
        # one test's namespace would be restored into another's. Written
        # only when the driver changes a global sysctl; cleanup removes it.
        self.sysctl_state = Path(tempfile.gettempdir()) / f"{topology.prefix}-sysctls.json"
        self.pods: dict[str, Pod] = {}
        for spec in scenario.PODS:
            self.add_pod(spec.name)

    def add_pod(self, name: str) -> Pod:
        spec = scenario.pod(name)
        pod = self.node.add_pod(spec.name, spec.ipv4, spec.ipv6)
        for port in TCP_PORTS:
            pod.listen("tcp", port)
        for port in UDP_PORTS:
            pod.listen("udp", port)
        self.pods[name] = pod
        return pod

    @property
    def ifaces(self) -> dict[str, str]:
        return {name: pod.iface for name, pod in self.pods.items()}

    def ns(self, name: str) -> Namespace:
        if name == "node":  # the host network itself (kubelet, host-network pods)
            return self.node
        return self.node.external if name == "external" else self.pods[name]

    def start_driver(
        self,
        *args: str,
        policies: bool = True,
        extra: list[Message] | None = None,
        env: dict[str, str] | None = None,
        **config: str,
    ) -> FelixHarness:
        state = ("--sysctl-state", str(self.sysctl_state))
        felix = FelixHarness("--platform", "linux", *state, *args, netns=self.node.netns, env=env)
        felix.send(
            *scenario.node_messages(self.ifaces, with_policies=policies, extra=extra, **config)
        )
        felix.recv_until("dataplane_in_sync", timeout=60)
        return felix

    def wait_for(self, probe: Probe, deadline: float = 15.0) -> None:
        """Probe until the verdict is the expected one (the driver applies async)."""
        end = time.monotonic() + deadline
        while not self.probe(probe):
            if time.monotonic() > end:
                raise AssertionError(f"not converged within {deadline}s: {probe}")

    def probe(self, probe: Probe) -> bool:
        """True if the verdict is the expected one."""
        return self.verdict(probe) == probe.expect

    def verdict(self, probe: Probe) -> bool:
        src = self.ns(probe.src)
        dst = self.ns(probe.dst)
        timeout = ALLOW_TIMEOUT if probe.expect else DENY_TIMEOUT
        address = dst.address(probe.family)  # type: ignore[arg-type]
        if probe.proto == "icmp":
            return src.ping(address, timeout=timeout)
        return src.can_connect(probe.proto, address, probe.port, timeout=timeout)  # type: ignore[arg-type]

    def failures(self, probes: Iterable[Probe]) -> list[str]:
        """Every probe whose verdict differs from its expectation (run in parallel)."""
        probes = list(probes)
        with ThreadPoolExecutor(max_workers=16) as pool:
            results = list(pool.map(self.verdict, probes))
        return [str(p) for p, got in zip(probes, results, strict=True) if got != p.expect]
