"""A real Kubernetes control plane in a namespace of a topology.

Model::

    control-plane netns:  etcd (127.0.0.1:2379)  kube-apiserver (:6443)
                          [kube-controller-manager]   socat ─┐
    test process ── TLS over a Unix socket ──────────────────┘

etcd and kube-apiserver are the real binaries that :mod:`testbed.upstream`
builds from the Go module proxy. They run inside a network namespace of
their own, so they never bind an address of the host; the test process
reaches the API server through a Unix socket that ``socat`` forwards to it
inside the namespace (the only way in from outside, besides the addresses
of namespaces joined to it later). kube-controller-manager is optional:
only its EndpointSlice and service-account controllers run, which is what
turns Pods into EndpointSlices.

Authentication is a static token of ``system:masters`` (RBAC on, so other
identities get only what they are granted), TLS is a CA made here with
``openssl`` and a serving certificate naming ``kubernetes.default.svc`` and
the API server's addresses; service-account tokens are signed with a key
made here too. There is no kubelet: a Pod's status (IP, Ready) is written
by the test through the status subresource, as a kubelet would.

Invariants: every process runs inside the namespace, which the topology
deletes (killing them) on close; :meth:`ControlPlane.stop` stops them first
and keeps their logs, which :class:`ControlPlaneError` quotes when a
start fails.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import ssl
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from testbed import upstream
from testbed.topology import Namespace, Topology, TopologyError

__all__ = ["ControlPlane", "ControlPlaneError", "unavailable"]

API_PORT = 6443
ETCD_PORT = 2379
SERVICE_CIDR = "10.96.0.0/16"
START_TIMEOUT = 90.0
# The name the serving certificate carries and clients ask for (SNI).
API_HOST = "kubernetes.default.svc"
BINARIES = {
    "etcd": f"etcd-{upstream.ETCD}",
    "apiserver": f"kube-apiserver-{upstream.K8S}",
    "controller-manager": f"kube-controller-manager-{upstream.K8S}",
}


class ControlPlaneError(TopologyError):
    """The control plane did not come up (or a request to it failed); says why."""


def unavailable(*, controller_manager: bool = False) -> str | None:
    """Why a control plane cannot start here (a skip reason), or None."""
    names = ["etcd", "apiserver"] + (["controller-manager"] if controller_manager else [])
    for name in names:
        try:
            upstream.binary(BINARIES[name])
        except upstream.UnavailableError as exc:
            return str(exc)
    return None


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ControlPlaneError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def _make_pki(pki: Path, addresses: list[str]) -> None:
    """A CA, the API server's serving pair, and the service-account signing key."""
    pki.mkdir(parents=True, exist_ok=True)
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=pki)
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=dataplane-test-ca",
        "-days", "2", "-out", "ca.crt", cwd=pki,
    )  # fmt: skip
    _openssl("genrsa", "-out", "apiserver.key", "2048", cwd=pki)
    sans = ",".join(
        [f"DNS:{API_HOST}", "DNS:kubernetes", "DNS:kubernetes.default", "DNS:localhost"]
        + [f"IP:{a}" for a in addresses]
    )
    (pki / "san.cnf").write_text(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n")
    _openssl(
        "req", "-new", "-key", "apiserver.key", "-subj", "/CN=kube-apiserver",
        "-out", "apiserver.csr", cwd=pki,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "san.cnf", "-out", "apiserver.crt",
        cwd=pki,
    )  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


class ControlPlane:
    """etcd, kube-apiserver and optionally kube-controller-manager, in one namespace.

    Use as a context manager (or call :meth:`start` and :meth:`stop`).
    ``addresses`` are extra IPs the serving certificate names (the
    namespace's addresses on an underlay, for drivers in node namespaces).
    Without ``watch_cache`` every watch is served by etcd, as for a
    resource the cache does not hold: a version older than the last
    compaction is then 410 at once, and no bookmarks are sent.
    """

    def __init__(
        self,
        topology: Topology,
        workdir: Path,
        *,
        controller_manager: bool = False,
        addresses: tuple[str, ...] = (),
        watch_cache: bool = True,
    ) -> None:
        self.topology = topology
        self.workdir = workdir
        self.with_controller_manager = controller_manager
        self.addresses = addresses
        self.ns = Namespace(topology, "control-plane", topology.new_netns("cpl"), {4: "127.0.0.1"})
        topology.adopt(self.ns)
        self.token = secrets.token_hex(16)
        self.socket = workdir / "apiserver.sock"
        self.pki = workdir / "pki"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self.watch_cache = watch_cache
        self._links = 0
        self.attached: dict[str, str] = {}  # netns -> its address on the link
        self._client: httpx.Client | None = None

    # --- lifecycle ----------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        self.ns.ip("link", "set", "lo", "up")
        _make_pki(self.pki, ["127.0.0.1", *self.addresses])
        (self.workdir / "tokens.csv").write_text(
            f"{self.token},dataplane-test-admin,uid-admin,system:masters\n"
        )
        self._spawn("etcd", self._etcd_argv())
        self._spawn("apiserver", self._apiserver_argv())
        self._spawn(
            "socat",
            [
                "socat",
                f"UNIX-LISTEN:{self.socket},fork,mode=600,unlink-early",
                f"TCP:127.0.0.1:{API_PORT}",
            ],
        )
        self._wait_ready()
        if self.with_controller_manager:
            self._spawn("controller-manager", self._controller_manager_argv())

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        for proc in reversed(list(self._procs.values())):
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again (etcd keeps the data); until ready."""
        self.stop_apiserver()
        self.start_apiserver()

    def stop_apiserver(self) -> None:
        """Kill kube-apiserver, as a crash or a lost node does (a graceful stop waits
        for open watches); :meth:`start_apiserver` brings it back."""
        proc = self._procs.pop("apiserver")
        proc.kill()
        proc.wait(timeout=30)

    def start_apiserver(self) -> None:
        self._spawn("apiserver", self._apiserver_argv())
        self._wait_ready()

    def compact(self) -> int:
        """Compact etcd (physically) past every revision handed out before the call.

        It writes a key of its own first (outside the API server's prefix) and
        compacts at that write's revision: a watch resumes from the revision
        after the last one its client saw, and etcd still serves a watch
        starting exactly at the compacted revision, so compacting at the
        current one would spare a client whose version is one write behind.
        Returns the compacted revision. Through etcd's JSON gateway, from
        inside the namespace (etcd listens on its loopback only).
        """
        script = (
            "import base64, json, urllib.request as u\n"
            "def call(path, body):\n"
            f"    url = 'http://127.0.0.1:{ETCD_PORT}' + path\n"
            "    r = u.urlopen(url, data=json.dumps(body).encode())\n"
            "    return json.loads(r.read())\n"
            "key = base64.b64encode(b'/testbed/compaction-mark').decode()\n"
            "rev = call('/v3/kv/put', {'key': key, 'value': key})['header']['revision']\n"
            "call('/v3/kv/compaction', {'revision': rev, 'physical': True})\n"
            "print(rev)\n"
        )
        result = self.ns.run("python3", "-c", script)
        return int(result.stdout.strip())

    def log(self, name: str) -> str:
        """The log a process of the control plane wrote (``etcd``, ``apiserver``, ...)."""
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _spawn(self, name: str, argv: list[str]) -> None:
        with (self.workdir / f"{name}.log").open("wb") as log:
            self._procs[name] = subprocess.Popen(
                ["ip", "netns", "exec", self.ns.netns, *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def _etcd_argv(self) -> list[str]:
        url = f"http://127.0.0.1:{ETCD_PORT}"
        return [
            str(upstream.binary(BINARIES["etcd"])),
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}",
            "--listen-peer-urls=http://127.0.0.1:2380",
            "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            "--initial-cluster=default=http://127.0.0.1:2380",
            # A test cluster's etcd: losing it with the machine is fine, and
            # without fsync every write is far cheaper on a busy CI disk.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]

    def _apiserver_argv(self) -> list[str]:
        pki = self.pki
        advertise = self.addresses[0] if self.addresses else "127.0.0.1"
        return [
            str(upstream.binary(BINARIES["apiserver"])),
            f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}",
            "--bind-address=0.0.0.0",
            f"--secure-port={API_PORT}",
            f"--advertise-address={advertise}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            # With no controller manager no namespace gets its default
            # ServiceAccount, which this admission plugin would wait for.
            *(
                []
                if self.with_controller_manager
                else ["--disable-admission-plugins=ServiceAccount"]
            ),
            "--profiling=false",
            "--v=1",
            *([] if self.watch_cache else ["--watch-cache=false"]),
        ]

    def _controller_manager_argv(self) -> list[str]:
        kubeconfig = self.workdir / "controller-manager.kubeconfig"
        kubeconfig.write_text(self.kubeconfig(f"https://127.0.0.1:{API_PORT}"))
        return [
            str(upstream.binary(BINARIES["controller-manager"])),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--controllers=endpointslice-controller,serviceaccount-controller,namespace-controller",
            f"--service-account-private-key-file={self.pki / 'sa.key'}",
            f"--root-ca-file={self.pki / 'ca.crt'}",
            "--use-service-account-credentials=false",
            "--leader-elect=false",
            "--secure-port=0",
            "--v=1",
        ]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        last = "no answer yet"
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise ControlPlaneError(
                        f"{name} exited {proc.returncode} at start: {self._tail(name)}"
                    )
            try:
                response = self.client.get("/readyz")
                if response.status_code == 200:
                    return
                last = f"/readyz {response.status_code}"
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.2)  # polling a process start, not a test's verdict
        raise ControlPlaneError(
            f"kube-apiserver not ready in {START_TIMEOUT:.0f} s ({last}): {self._tail('apiserver')}"
        )

    def _tail(self, name: str, lines: int = 5) -> str:
        return " | ".join(self.log(name).strip().splitlines()[-lines:])

    def attach(self, ns: Namespace) -> str:
        """Join ``ns`` (a node) to the API server with a veth; returns the server's URL.

        Link ``n`` is 192.168.250.(4n)/30: the API server's side .1, the
        node's .2 (device ``kapi0``), a connected route and nothing else —
        the node reaches the API server and no other address of this
        namespace. Deleting either namespace removes the link.
        """
        index = self._links
        self._links += 1
        if index >= 64:
            raise ControlPlaneError("at most 64 attached namespaces")
        base = 4 * index
        here, there = f"192.168.250.{base + 1}", f"192.168.250.{base + 2}"
        device = f"kapi{index}"
        self.ns.ip(
            "link", "add", device, "type", "veth", "peer", "name", "kapi0", "netns", ns.netns
        )
        self.ns.ip_batch(f"addr add {here}/30 dev {device}", f"link set {device} up")
        ns.ip_batch(f"addr add {there}/30 dev kapi0", "link set kapi0 up")
        self.attached[ns.netns] = there
        return f"https://{here}:{API_PORT}"

    # --- clients ------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.pki / "ca.crt"))

    @property
    def client(self) -> httpx.Client:
        """An admin client over the Unix socket (TLS verified against our CA)."""
        if self._client is None:
            self._client = httpx.Client(
                transport=httpx.HTTPTransport(uds=str(self.socket), verify=self.ssl_context()),
                base_url=f"https://{API_HOST}",
                headers={"Authorization": f"Bearer {self.token}"},
                timeout=10.0,
            )
        return self._client

    def kubeconfig(self, server: str, token: str | None = None) -> str:
        """A kubeconfig for ``server`` with this CA and the admin token (or ``token``)."""
        ca = (self.pki / "ca.crt").read_text()
        data = base64.b64encode(ca.encode()).decode()
        return (
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: test\n  cluster:\n    server: {server}\n"
            f"    certificate-authority-data: {data}\n"
            f"    tls-server-name: {API_HOST}\n"
            f"users:\n- name: test\n  user:\n    token: {token or self.token}\n"
            "contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n"
            "current-context: test\n"
        )

    def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None, **kw: Any
    ) -> dict[str, Any]:
        """One API call; a non-2xx answer is a ControlPlaneError quoting the Status."""
        response = self.client.request(method, path, json=body, **kw)
        if response.status_code >= 300:
            raise ControlPlaneError(
                f"{method} {path}: {response.status_code} {response.text.strip()[:300]}"
            )
        result: dict[str, Any] = response.json()
        return result

    def create(self, path: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, obj)

    def get(self, path: str) -> dict[str, Any]:
        return self.request("GET", path)

    def delete(self, path: str) -> dict[str, Any]:
        return self.request("DELETE", path)

    def patch_status(self, path: str, status: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch an object's status subresource, as its controller (or kubelet) would."""
        return self.request(
            "PATCH",
            f"{path}/status",
            {"status": status},
            headers={"Content-Type": "application/merge-patch+json"},
        )

    @contextlib.contextmanager
    def watching(self, path: str, **params: str) -> Iterator[Iterator[dict[str, Any]]]:
        """A watch on ``path``: yields an iterator of its events (decoded JSON)."""
        with self.client.stream(
            "GET", path, params={"watch": "true", **params}, timeout=None
        ) as response:
            if response.status_code != 200:
                raise ControlPlaneError(f"watch {path}: {response.status_code}")
            yield (json.loads(line) for line in response.iter_lines() if line)
