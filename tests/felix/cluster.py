"""A one-node Calico cluster under the real Felix, and how tests judge it.

:func:`running` brings up the real control plane, the release's Calico
(CRDs, initialisation, an IPv4 pool), a node namespace with calico-felix
running our driver, and three pods made by the CNI plugin: ``web`` and
``client`` in namespace ``alpha`` (labels ``team=a``), ``other`` and
``db`` in ``beta`` (``team=b``); each has the label ``app`` (``web``,
``client``, ``client``, ``db``). Every pod answers TCP on :data:`PORT` (named
``http``) and UDP on :data:`UDP_PORT` with its name. Tests change the
cluster through the API or calicoctl and put it back when they are done:
one cluster serves a whole session's tests of a release and backend. The
driver takes services from the API (``DATAPLANE_SERVICES_SOURCE=
kubernetes``), whose EndpointSlices kube-controller-manager writes from
the pods.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from testbed.calico import Calico
from testbed.calico import unavailable as calico_unavailable
from testbed.control_plane import ControlPlane
from testbed.control_plane import unavailable as cp_unavailable
from testbed.felix import Felix
from testbed.topology import Namespace, Node, Pod, Proto, Topology
from tests.kernel.marks import KERNEL_UNAVAILABLE
from tests.waiting import eventually

__all__ = [
    "PORT",
    "PROGRAMMED",
    "UDP_PORT",
    "Cluster",
    "complaints",
    "own_cluster",
    "running",
    "skip_unless_runnable",
    "verdicts",
    "without_counters",
]

PORT = 8080
UDP_PORT = 5353
OPS_PORT = 9095  # the driver's /metrics, on the node's loopback
PROGRAMMED = 60.0  # Felix's start, its sync with the API, the driver's first apply
NAMESPACES = {"alpha": {"team": "a"}, "beta": {"team": "b"}}
PODS = (
    ("alpha", "web", "web"),
    ("alpha", "client", "client"),
    ("beta", "other", "client"),
    ("beta", "db", "db"),
)

_names = itertools.count()
_NFT_COUNTER = re.compile(r"counter packets \d+ bytes \d+")
_IPT_COUNTER = re.compile(r"\[\d+:\d+\]")


@dataclass
class Cluster:
    calico: Calico
    node: Node
    felix: Felix
    nftables_mode: str
    pods: dict[str, Pod] = field(default_factory=dict)

    @property
    def cp(self) -> ControlPlane:
        return self.calico.cp

    @property
    def external(self) -> Namespace:
        return self.node.external

    # --- pods ------------------------------------------------------------------

    def pod(self, namespace: str, name: str, **labels: str) -> Pod:
        """A pod made by the CNI plugin, serving TCP and UDP with its name."""
        ports = [{"name": "http", "containerPort": PORT, "protocol": "TCP"}]
        pod = self.calico.add_pod(self.node, namespace, name, labels, ports)
        pod.listen("tcp", PORT, 4)
        pod.listen("udp", UDP_PORT, 4)
        self.pods[name] = pod
        return pod

    def remove_pod(self, name: str) -> None:
        """CNI DEL, then the Pod object, then its namespace."""
        self.calico.delete_pod(self.pods.pop(name))

    def label_pod(self, name: str, labels: Mapping[str, str | None]) -> None:
        self._patch_pod_metadata(name, "labels", labels)

    def annotate_pod(self, name: str, annotations: Mapping[str, str | None]) -> None:
        """Set (or, with None, remove) the Pod object's annotations."""
        self._patch_pod_metadata(name, "annotations", annotations)

    def _patch_pod_metadata(self, name: str, key: str, values: Mapping[str, str | None]) -> None:
        """Merge ``values`` into the Pod object's ``metadata[key]`` (None removes one)."""
        namespace, api_name = self.calico.pod_names[self.pods[name].netns]
        self.cp.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{api_name}",
            {"metadata": {key: dict(values)}},
            headers={"Content-Type": "application/merge-patch+json"},
        )

    # --- Services ------------------------------------------------------------------

    @contextlib.contextmanager
    def service(self, namespace: str, name: str, spec: Mapping[str, Any]) -> Iterator[Any]:
        """A Service in the API (deleted at the end); yields it as created."""
        path = f"/api/v1/namespaces/{namespace}/services"
        created = self.cp.create(path, {"metadata": {"name": name}, "spec": dict(spec)})
        try:
            yield created
        finally:
            self.cp.delete(f"{path}/{name}")

    def served_by(self, src: str, address: str, port: int, proto: Proto = "tcp") -> str | None:
        """Which pod answered one connection from ``src``, or None."""
        probe = self.source(src).connect(proto, address, port, timeout=0.5)
        return probe.reply if probe.ok else None

    # --- Kubernetes NetworkPolicy ---------------------------------------------------

    def netpol(self, namespace: str, spec: Mapping[str, Any], name: str | None = None) -> str:
        name = name or f"np{next(_names)}"
        self.cp.create(
            f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies",
            {"metadata": {"name": name, "namespace": namespace}, "spec": dict(spec)},
        )
        return name

    def replace_netpol(self, namespace: str, name: str, spec: Mapping[str, Any]) -> None:
        path = f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/{name}"
        current = self.cp.get(path)
        current["spec"] = dict(spec)
        self.cp.request("PUT", path, current)

    def delete_netpol(self, namespace: str, name: str) -> None:
        self.cp.delete(f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/{name}")

    @contextlib.contextmanager
    def netpols(self, namespace: str, *specs: Mapping[str, Any]) -> Iterator[list[str]]:
        names = [self.netpol(namespace, spec) for spec in specs]
        try:
            yield names
        finally:
            for name in names:
                self.delete_netpol(namespace, name)

    @contextlib.contextmanager
    def calico_resources(self, *resources: Mapping[str, Any]) -> Iterator[None]:
        """``calicoctl apply`` them; ``calicoctl delete`` them, last first, at the end."""
        self.calico.apply(*resources)
        try:
            yield
        finally:
            for r in reversed(resources):
                meta = r["metadata"]
                self.calico.delete(r["kind"], meta["name"], meta.get("namespace"))

    # --- what the kernel holds ------------------------------------------------------

    def rules(self) -> list[str]:
        """Every rule in the node's kernel, as it would show a rewrite.

        nftables: each rule with its handle (a rewritten rule gets a new
        one), counters and set elements left out. iptables: the rules of
        ``iptables-save`` without counters; a rule rewritten with the same
        text does not show there, so :meth:`lines_written` goes with it.
        """
        if self.nftables_mode == "Enabled":
            text = self.node.run("nft", "-a", "list", "ruleset").stdout
            rules, chain = [], None
            for line in text.splitlines():
                stripped = line.strip()
                if stripped.startswith("chain "):
                    chain = stripped.split()[1]
                elif stripped.startswith(("set ", "map ")) or stripped == "}":
                    chain = None
                elif chain is not None and "# handle" in stripped:
                    rules.append(f"{chain}: {without_counters(stripped)}")
            return rules
        text = self.node.run("iptables-save").stdout
        return [line for line in text.splitlines() if line.startswith("-A ")]

    def lines_written(self) -> float:
        """The rule lines the running driver has written to iptables (0 on nftables)."""
        return self.metric("felix_iptables_lines_executed_total")

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples on the driver's /metrics (those with ``labels``)."""
        script = (
            "import urllib.request as u\n"
            f"print(u.urlopen('http://127.0.0.1:{OPS_PORT}/metrics', timeout=5).read().decode())"
        )
        text = self.node.run("python3", "-c", script).stdout
        values = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if (line.startswith(name + "{") or line.startswith(name + " "))
            and all(f'{k}="{v}"' in line for k, v in labels.items())
        ]
        return sum(values)

    # --- verdicts --------------------------------------------------------------

    def source(self, name: str) -> Namespace:
        return self.external if name == "external" else self.pods[name]

    def reaches(self, src: str, dst: str, proto: Proto = "tcp", port: int | None = None) -> bool:
        """One real connection from ``src`` (a pod or ``external``) to pod ``dst``."""
        target = self.pods[dst]
        port = port if port is not None else (PORT if proto == "tcp" else UDP_PORT)
        probe = self.source(src).connect(proto, target.ipv4, port, timeout=0.5)
        return probe.ok and probe.reply == dst

    def expect(
        self,
        want: Mapping[tuple[str, str], bool],
        proto: Proto = "tcp",
        what: str = "",
        deadline: float = PROGRAMMED,
    ) -> None:
        """Wait until every ``(src, dst)`` connection's verdict is as wanted."""
        verdicts(
            lambda pair: self.reaches(pair[0], pair[1], proto),
            {f"{a}->{b}": ok for (a, b), ok in want.items()},
            want,
            f"{what} ({proto}; Felix's log {self.felix.log_path})",
            deadline,
        )


def verdicts(
    check: Callable[[Any], bool],
    expected: Mapping[str, bool],
    cases: Mapping[Any, bool],
    what: str,
    deadline: float = PROGRAMMED,
) -> None:
    """Wait until ``check(case)`` for every case is as ``expected`` says (same order).

    ``expected`` names each case for the message, which gives what was
    wanted and the verdicts last seen.
    """
    seen: dict[str, bool] = {}

    def holds() -> bool:
        seen.clear()
        seen.update({name: check(case) for name, case in zip(expected, cases, strict=True)})
        return seen == dict(expected)

    try:
        eventually(holds, deadline, f"{what}: want {dict(expected)}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen}") from exc


def without_counters(text: str) -> str:
    """``text`` (an ``nft list`` or ``iptables-save`` dump) with packet counts blanked.

    Counters move with every packet; what was written is the rest.
    """
    return _IPT_COUNTER.sub("", _NFT_COUNTER.sub("counter", text))


def complaints(log: str) -> list[str]:
    """Felix's and the driver's WARNING and worse lines, outside Felix's own shutdowns.

    The driver's stderr is Felix's, so its lines (``... WARNING dataplane...``)
    are in the same log: a refused setting or field of what Felix sends in
    steady state would be one (docs/felix-parity.md).

    From "Felix is shutting down" until it starts again ("Felix starting
    up"), Felix logs a WARNING for any driver that exits (``Driver process
    stopped error=<nil>``), an ERROR for the EOF on its pipe and a FATAL to
    exit (``daemon.go``'s ``monitorAndManageShutdown``), whatever the driver
    did: those are Felix's own shutdown, not the driver's doing.
    """
    found, stopping = [], False
    for line in log.splitlines():
        if "Felix is shutting down" in line:
            stopping = True
        elif "Felix starting up" in line:
            stopping = False
        elif not stopping and (
            re.search(r"\[(WARNING|ERROR|FATAL|PANIC)\]", line)
            or re.search(r" (WARNING|ERROR|CRITICAL) dataplane", line)
        ):
            found.append(line)
    return found


@contextlib.contextmanager
def running(
    topo: Topology,
    workdir: Path,
    release: str,
    nftables_mode: str,
    *,
    services_from_api: bool = True,
) -> Iterator[Cluster]:
    """The one-node cluster of this module's docstring, torn down at the end.

    Without ``services_from_api`` the driver keeps its default services
    source (Felix's messages), as a node beside kube-proxy runs it.
    """
    with ControlPlane(topo, workdir, controller_manager=True) as cp:
        calico = Calico(cp, release, workdir)
        calico.install()
        node = topo.add_node("node-1")
        calico.add_node(node)
        for namespace, labels in NAMESPACES.items():
            calico.create_namespace(namespace, labels)
        env = {
            "FELIX_NFTABLESMODE": nftables_mode,
            "DATAPLANE_LISTEN": f"127.0.0.1:{OPS_PORT}",
        }
        if services_from_api:
            # As an operator switches kube-proxy off: services from the API,
            # with the node's credentials (the node name is Felix's NODENAME).
            env["DATAPLANE_SERVICES_SOURCE"] = "kubernetes"
            env["DATAPLANE_KUBECONFIG"] = str(calico.node_kubeconfigs[node.netns])
        felix = calico.start_felix(node, env)
        cluster = Cluster(calico, node, felix, nftables_mode)
        try:
            for namespace, name, app in PODS:
                cluster.pod(namespace, name, app=app)
            yield cluster
        finally:
            felix.stop()
            print(f"Felix's log: {felix.log_path}")


def skip_unless_runnable(release: str) -> None:
    """Skip with the reason when namespaces, the control plane or the release are missing."""
    for why in (KERNEL_UNAVAILABLE, cp_unavailable(controller_manager=True)):
        if why is not None:
            pytest.skip(why)
    if (why := calico_unavailable(release)) is not None:
        pytest.skip(why)


@contextlib.contextmanager
def own_cluster(
    felix_setup: tuple[str, str],
    tmp_path_factory: pytest.TempPathFactory,
    label: str,
    *,
    services_from_api: bool = True,
) -> Iterator[Cluster]:
    """A one-node cluster (tests.felix.cluster) of this release and backend, skips as it must."""
    release, nftables_mode = felix_setup
    skip_unless_runnable(release)
    workdir = Path(tmp_path_factory.mktemp(f"{label}-{release}-{nftables_mode}"))
    with (
        Topology() as topo,
        running(topo, workdir, release, nftables_mode, services_from_api=services_from_api) as made,
    ):
        yield made
