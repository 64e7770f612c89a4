"""How to reach the Kubernetes API: in-cluster credentials or a kubeconfig.

In a pod (calico-node's container, whose environment Felix hands to the
driver) the API is ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``,
trusted through the service account's ``ca.crt``, with its ``token``; the
token is a bound one that the kubelet rotates, so it is read again (as
client-go does) rather than once. Outside a pod, a kubeconfig names the
server, the CA and a token, token file or client certificate; exec and
auth-provider plugins are not supported and say so.

No I/O besides reading these files; the HTTP client is in :mod:`.api`.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dataplane.errors import DataplaneError

__all__ = ["SERVICE_ACCOUNT_DIR", "Connection", "KubeConnectionError", "in_cluster", "kubeconfig"]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0  # client-go re-reads a bound token every minute


class KubeConnectionError(DataplaneError):
    """The API cannot be reached as configured; the text says what is missing."""


@dataclass
class TokenFile:
    """A bearer token read from a file, again once a minute (bound tokens rotate)."""

    path: Path
    clock: Callable[[], float] = time.monotonic
    _token: str = ""
    _read_at: float = field(default=-1e18)

    def __call__(self) -> str:
        now = self.clock()
        if now - self._read_at >= TOKEN_REREAD_SECONDS:
            try:
                self._token = self.path.read_text().strip()
            except OSError as exc:
                if not self._token:
                    raise KubeConnectionError(f"token file {self.path}: {exc.strerror}") from exc
            self._read_at = now
        return self._token


@dataclass(frozen=True)
class Connection:
    """The API server, how to trust it, and how to authenticate to it."""

    server: str  # https://host:port
    ca_pem: str | None  # None: the system's trust store
    token: Callable[[], str] | None
    client_cert: tuple[str, str] | None = None  # (cert PEM, key PEM)
    tls_server_name: str | None = None  # SNI and the name verified, if not the host's
    insecure: bool = False
    source: str = ""  # where this came from, for log lines

    def ssl_context(self) -> ssl.SSLContext:
        context = (
            ssl.create_default_context(cadata=self.ca_pem)
            if self.ca_pem
            else (ssl.create_default_context())
        )
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.client_cert is not None:
            # The ssl module loads a chain from files only: a private temp
            # directory holds the pair just long enough to load it.
            cert, key = self.client_cert
            with tempfile.TemporaryDirectory(prefix="dataplane-kube-") as tmp:
                cert_path, key_path = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
                cert_path.write_text(cert)
                key_path.touch(mode=0o600)
                key_path.write_text(key)
                context.load_cert_chain(cert_path, key_path)
        return context

    def headers(self) -> dict[str, str]:
        if self.token is None:
            return {}
        return {"Authorization": f"Bearer {self.token()}"}


def in_cluster(
    environ: Mapping[str, str] | None = None, directory: Path = SERVICE_ACCOUNT_DIR
) -> Connection:
    """The pod's service account, as client-go's InClusterConfig reads it.

    Raises:
        KubeConnectionError: not in a pod (no service host variables, or no token).
    """
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeConnectionError(
            "not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"
            " (give --kubeconfig instead)"
        )
    token_path = directory / "token"
    if not token_path.exists():
        raise KubeConnectionError(f"in-cluster: no service-account token at {token_path}")
    ca_path = directory / "ca.crt"
    try:
        ca = ca_path.read_text()
    except OSError as exc:
        raise KubeConnectionError(f"in-cluster: {ca_path}: {exc.strerror}") from exc
    bracketed = f"[{host}]" if ":" in host else host
    return Connection(
        server=f"https://{bracketed}:{port}",
        ca_pem=ca,
        token=TokenFile(token_path),
        source="in-cluster service account",
    )


def _named(entries: Any, name: str, what: str, path: Path) -> dict[str, Any]:
    for entry in entries or ():
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(what)
            return body if isinstance(body, dict) else {}
    raise KubeConnectionError(f"kubeconfig {path}: no {what} named {name!r}")


def _data_or_file(body: dict[str, Any], key: str, base: Path) -> str | None:
    """``<key>-data`` (base64) or ``<key>`` (a path, relative to the kubeconfig)."""
    data = body.get(f"{key}-data")
    if data:
        return base64.b64decode(str(data)).decode()
    path = body.get(key)
    if path:
        return (base / str(path)).read_text()
    return None


def kubeconfig(path: Path, context: str | None = None) -> Connection:
    """The server and credentials of ``context`` (default: current-context).

    Raises:
        KubeConnectionError: unreadable, incomplete, or asks for a plugin.
    """
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise KubeConnectionError(f"kubeconfig {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise KubeConnectionError(f"kubeconfig {path}: not YAML ({exc})") from exc
    if not isinstance(doc, dict):
        raise KubeConnectionError(f"kubeconfig {path}: not a kubeconfig")
    name = context or doc.get("current-context")
    if not name:
        raise KubeConnectionError(f"kubeconfig {path}: no current-context (give --kube-context)")
    ctx = _named(doc.get("contexts"), name, "context", path)
    cluster = _named(doc.get("clusters"), str(ctx.get("cluster")), "cluster", path)
    user = _named(doc.get("users"), str(ctx.get("user")), "user", path) if ctx.get("user") else {}
    if "exec" in user or "auth-provider" in user:
        raise KubeConnectionError(
            f"kubeconfig {path}: user {ctx.get('user')!r} needs an exec or auth-provider"
            " plugin, which this driver does not run; use a token or client certificate"
        )
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith("https://"):
        raise KubeConnectionError(
            f"kubeconfig {path}: cluster server must be https://, not {server!r}"
        )
    base = path.parent
    try:
        ca = _data_or_file(cluster, "certificate-authority", base)
        cert = _data_or_file(user, "client-certificate", base)
        key = _data_or_file(user, "client-key", base)
    except (OSError, ValueError) as exc:
        raise KubeConnectionError(f"kubeconfig {path}: {exc}") from exc
    token: Callable[[], str] | None = None
    if user.get("token"):
        fixed = str(user["token"])
        token = lambda: fixed  # noqa: E731 - a constant token source
    elif user.get("tokenFile"):
        token = TokenFile(base / str(user["tokenFile"]))
    return Connection(
        server=server.rstrip("/"),
        ca_pem=ca,
        token=token,
        client_cert=(cert, key) if cert and key else None,
        tls_server_name=str(cluster["tls-server-name"]) if cluster.get("tls-server-name") else None,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        source=f"kubeconfig {path} (context {name})",
    )
