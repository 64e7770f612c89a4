"""Calico on the test bed's control plane: CRDs, calico-node, calicoctl, the CNI plugin, Felix.

Model::

    control-plane netns: etcd, kube-apiserver, kube-controller-manager; calicoctl runs here
    node netns:          calico-node -startup, -allocate-tunnel-addrs-run-once (once)
                         calico-felix ─fds 3/4─ dataplane-driver     (Felix's own env)
                         calico CNI plugin (ADD/DEL) ─ calico-ipam ──▶ API (IPAM blocks)
    pod netns:           eth0 made, addressed and routed by the CNI plugin

Everything Calico here is the real thing, built from the source archives
(:mod:`testbed.upstream.calico`): the CRDs come from the same archive's
``libcalico-go/config/crd/``; the real calico-node's start-up initialises
the cluster (ClusterInformation with ``datastoreReady``, the tiers) and
each node (its address annotations, the ``nodename`` file, its VXLAN
tunnel address); pods are made by the CNI plugin with Calico IPAM; Felix
runs in KDD mode with our ``dataplane-driver`` as its ``DataplaneDriver``. There is no kubelet: a
test writes a Pod's status (IP, Ready) as a kubelet would, after the CNI
plugin made its network.

Felix itself is :class:`testbed.felix.Felix`.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed import upstream
from testbed.control_plane import API_PORT, ControlPlane, ControlPlaneError
from testbed.felix import Felix
from testbed.topology import Node, Pod, Topology, TopologyError

__all__ = ["Calico", "CalicoError", "unavailable"]

POOL_V4 = "10.65.0.0/16"  # the topology's pod range, so external hosts route it back
BLOCK_SIZE = 26
CNI_TIMEOUT = 60.0
READY_TIMEOUT = 60.0


class CalicoError(TopologyError):
    """A Calico tool failed, or Calico did not come up; says which and why."""


def unavailable(release: str) -> str | None:
    """Why Calico ``release`` cannot run here (a skip reason), or None."""
    try:
        Release.find(release)
    except (upstream.UnavailableError, upstream.calico.ArchiveError) as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class Release:
    """One Calico build: its label and where its parts are."""

    label: str
    node: Path
    felix: Path
    calicoctl: Path
    cni_dir: Path  # holds ``calico`` and ``calico-ipam``
    crds: Path

    @classmethod
    def find(cls, release: str) -> Release:
        """Raises UnavailableError (or ArchiveError) unless every binary of it is built."""
        label = upstream.calico.archive(release).label
        built = {name: upstream.binary(name) for name in upstream.calico.binaries(Path(), label)}
        plugin = built[f"calico-{label}"]
        return cls(
            label,
            built[f"calico-node-{label}"],
            built[f"calico-felix-{label}"],
            built[f"calicoctl-{label}"],
            plugin.parent,
            # bin/ and cni/ sit beside the unpacked source.
            plugin.parent.parent / "src" / "libcalico-go" / "config" / "crd",
        )


class Calico:
    """Calico (one release) installed on a control plane, with nodes, pods and Felix."""

    def __init__(self, cp: ControlPlane, release: str, workdir: Path) -> None:
        self.cp = cp
        self.release = Release.find(release)
        self.workdir = workdir
        self.topology: Topology = cp.topology
        self._local_kubeconfig = workdir / "calicoctl.kubeconfig"
        self._local_kubeconfig.write_text(cp.kubeconfig(f"https://127.0.0.1:{API_PORT}"))
        self.node_kubeconfigs: dict[str, Path] = {}
        self._pool: dict[str, Any] | None = None
        self.pod_names: dict[str, tuple[str, str]] = {}  # netns -> (namespace, name)

    # --- the cluster ---------------------------------------------------------

    def install(self, *, vxlan: bool = False) -> None:
        """The release's CRDs; the IPv4 pool (VXLAN or none) comes with the first node."""
        for path in sorted(self.release.crds.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc:
                    self.cp.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
        self._wait_established()
        self._pool = {
            "apiVersion": "projectcalico.org/v3",
            "kind": "IPPool",
            "metadata": {"name": "pods-v4"},
            "spec": {
                "cidr": POOL_V4,
                "blockSize": BLOCK_SIZE,
                "ipipMode": "Never",
                "vxlanMode": "Always" if vxlan else "Never",
                "natOutgoing": False,
                "nodeSelector": "all()",
            },
        }

    def _wait_established(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            crds = self.cp.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
            pending = [
                crd["metadata"]["name"]
                for crd in crds["items"]
                if not any(
                    c["type"] == "Established" and c["status"] == "True"
                    for c in (crd.get("status") or {}).get("conditions") or []
                )
            ]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise CalicoError(f"CRDs not established in {READY_TIMEOUT:.0f} s: {pending}")
            time.sleep(0.1)  # polling the API server's own work, not a verdict

    def calicoctl(self, *args: str, stdin: str | None = None) -> str:
        """Run calicoctl (KDD, admin) inside the control plane's namespace; its stdout."""
        result = self.cp.ns.run(
            "env",
            "DATASTORE_TYPE=kubernetes",
            f"KUBECONFIG={self._local_kubeconfig}",
            str(self.release.calicoctl),
            *args,
            check=False,
            stdin=stdin,
        )
        if result.returncode != 0:
            raise CalicoError(
                f"calicoctl {' '.join(args)}: exit {result.returncode}: "
                f"{(result.stderr or result.stdout).strip()}"
            )
        return result.stdout

    def apply(self, *resources: Mapping[str, Any]) -> None:
        """``calicoctl apply`` of projectcalico.org/v3 resources (one call for all)."""
        text = "".join("---\n" + yaml.safe_dump(dict(r)) for r in resources)
        self.calicoctl("apply", "-f", "-", stdin=text)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        args = ["delete", kind, name] + (["-n", namespace] if namespace else [])
        self.calicoctl(*args)

    # --- nodes ---------------------------------------------------------------

    def add_node(self, node: Node, name: str | None = None) -> str:
        """Join ``node`` to the cluster as calico-node's start-up does; returns its name.

        A veth to the API server, a kubeconfig, the Node object; then the
        real ``calico-node -startup`` in the node's namespace (the cluster's
        initialisation on the first node: ClusterInformation, the tiers;
        the node's address annotations from ``eth0``; the ``nodename``
        file the CNI plugin needs), the pool after the first node, and
        ``calico-node -allocate-tunnel-addrs-run-once`` (the VXLAN tunnel
        address, from the node's IPAM block).
        """
        name = name or node.name
        server = self.cp.attach(node)
        kubeconfig = self.workdir / f"{name}.kubeconfig"
        kubeconfig.write_text(self.cp.kubeconfig(server))
        self.node_kubeconfigs[node.netns] = kubeconfig
        self.cp.create(
            "/api/v1/nodes",
            {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}},
        )
        startup, tunnels = upstream.calico.node_commands(self.release.node)
        self._calico_node(node, name, startup)
        if self._pool is not None:
            self.apply(self._pool)
            self._pool = None
        self._calico_node(node, name, tunnels)
        return name

    def _calico_node(self, node: Node, name: str, argv: tuple[str, ...]) -> None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "DATASTORE_TYPE": "kubernetes",
            "KUBECONFIG": str(self.node_kubeconfigs[node.netns]),
            "NODENAME": name,
            "CALICO_NODENAME_FILE": str(self.workdir / f"{name}.nodename"),
            "CALICO_NETWORKING_BACKEND": "vxlan",  # no BIRD here
            "CLUSTER_TYPE": "k8s,kdd",
            "IP": "autodetect",
            "IP_AUTODETECTION_METHOD": "interface=eth0",
            "NO_DEFAULT_POOLS": "true",
            "WAIT_FOR_DATASTORE": "true",
            "CALICO_DISABLE_FILE_LOGGING": "true",
            "FELIX_IPV6SUPPORT": "false",
        }
        # It makes /var/lib/calico if missing: on a tmpfs of its own mount
        # namespace (ip netns exec's), never on this machine's disk.
        script = 'mount -t tmpfs tmpfs /var/lib && exec "$0" "$@"'
        result = subprocess.run(
            ["ip", "netns", "exec", node.netns, "sh", "-c", script, *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=READY_TIMEOUT,
            check=False,
        )
        with (self.workdir / f"calico-node-{name}.log").open("a") as log:
            log.write(result.stdout + result.stderr)
        if result.returncode != 0:
            raise CalicoError(
                f"{' '.join(argv[1:])} on {name}: exit {result.returncode}:"
                f" {(result.stderr or result.stdout).strip()[-500:]}"
            )

    # --- pods ----------------------------------------------------------------

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        self.cp.create(
            "/api/v1/namespaces", {"metadata": {"name": name, "labels": dict(labels or {})}}
        )

    def add_pod(
        self,
        node: Node,
        namespace: str,
        name: str,
        labels: Mapping[str, str] | None = None,
        ports: Sequence[Mapping[str, Any]] = (),
    ) -> Pod:
        """A Pod in the API on ``node``, its network made by the real CNI plugin.

        Then its status written as a kubelet would (IP, Running, Ready), so
        that EndpointSlices follow it.
        """
        node_name = self._node_name(node)
        body = {
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "spec": {
                "nodeName": node_name,
                "automountServiceAccountToken": False,
                "containers": [{"name": "main", "image": "none", "ports": list(ports)}],
            },
        }
        self._create_pod(namespace, body)
        netns = self.topology.new_netns("pod")
        result = self._cni(node, "ADD", netns, namespace, name)
        ipv4 = next(ip["address"].split("/")[0] for ip in result["ips"] if ":" not in ip["address"])
        iface = next(i["name"] for i in result["interfaces"] if "sandbox" not in i)
        pod = Pod(self.topology, name, netns, node=node, ipv4=ipv4, ipv6=None, iface=iface)
        node.pods[f"{namespace}/{name}"] = pod
        self.pod_names[netns] = (namespace, name)
        self.cp.patch_status(
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            {
                "phase": "Running",
                "podIP": ipv4,
                "podIPs": [{"ip": ipv4}],
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        )
        return pod

    def delete_pod(self, pod: Pod) -> None:
        """Delete the Pod as a user and its kubelet do, then its network namespace.

        The API delete marks it terminating; the kubelet's part follows:
        CNI DEL (the plugin releases its IP), then the delete with no grace
        that removes the object.
        """
        namespace, name = self.pod_names.pop(pod.netns)
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        self.cp.delete(path)
        self._cni(pod.node, "DEL", pod.netns, namespace, name)
        self.cp.request("DELETE", path, {"gracePeriodSeconds": 0})
        pod.agent.stop()
        del pod.node.pods[f"{namespace}/{name}"]
        self.topology.delete_netns(pod.netns)

    def _create_pod(self, namespace: str, body: Mapping[str, Any]) -> None:
        # The ServiceAccount admission plugin refuses a pod until the
        # controller manager has made the namespace's default account.
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            try:
                self.cp.create(f"/api/v1/namespaces/{namespace}/pods", body)
                return
            except ControlPlaneError as exc:
                if "serviceaccount" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(0.1)  # waiting on the controller manager, not a verdict

    def _node_name(self, node: Node) -> str:
        if node.netns not in self.node_kubeconfigs:
            raise CalicoError(f"{node.name} was not added with add_node()")
        return self.node_kubeconfigs[node.netns].stem

    def _cni(self, node: Node, command: str, netns: str, namespace: str, name: str) -> Any:
        node_name = self._node_name(node)
        config = {
            "cniVersion": "0.3.1",
            "name": "k8s-pod-network",
            "type": "calico",
            "datastore_type": "kubernetes",
            "nodename": node_name,
            "nodename_file": str(self.workdir / f"{node_name}.nodename"),
            "log_level": "info",
            "log_file_path": str(self.workdir / f"cni-{node_name}.log"),
            "mtu": 1450,
            "ipam": {"type": "calico-ipam", "assign_ipv4": "true", "assign_ipv6": "false"},
            "policy": {"type": "k8s"},
            "kubernetes": {"kubeconfig": str(self.node_kubeconfigs[node.netns])},
        }
        env = {
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": f"c-{netns}",
            "CNI_NETNS": f"/var/run/netns/{netns}",
            "CNI_IFNAME": "eth0",
            "CNI_PATH": str(self.release.cni_dir),
            "CNI_ARGS": (
                f"K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name};"
                f"K8S_POD_INFRA_CONTAINER_ID=c-{netns}"
            ),
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        }
        result = subprocess.run(
            ["ip", "netns", "exec", node.netns, str(self.release.cni_dir / "calico")],
            input=json.dumps(config),
            env=env,
            capture_output=True,
            text=True,
            timeout=CNI_TIMEOUT,
            check=False,
        )
        if result.returncode != 0:
            raise CalicoError(
                f"CNI {command} {namespace}/{name}: exit {result.returncode}:"
                f" {result.stdout.strip()} {result.stderr.strip()[-500:]}"
            )
        return json.loads(result.stdout) if command == "ADD" else None

    # --- Felix ---------------------------------------------------------------

    def start_felix(self, node: Node, env: Mapping[str, str] | None = None) -> Felix:
        """calico-felix in ``node``'s namespace (KDD), our driver as its dataplane."""
        return Felix(
            self.release.felix,
            node=node,
            name=self._node_name(node),
            kubeconfig=self.node_kubeconfigs[node.netns],
            workdir=self.workdir,
            env=dict(env or {}),
        )
