"""Reaching the API: in-cluster credentials and kubeconfigs, and what is refused."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from dataplane.kube.connection import KubeConnectionError, TokenFile, in_cluster, kubeconfig

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def _service_account(tmp_path: Path, token: str = "tok-1") -> Path:
    directory = tmp_path / "sa"
    directory.mkdir()
    (directory / "token").write_text(token + "\n")
    (directory / "ca.crt").write_text(CA)
    return directory


def test_in_cluster_reads_the_service_variables_and_the_account(tmp_path: Path) -> None:
    directory = _service_account(tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    conn = in_cluster(env, directory)
    assert conn.server == "https://10.96.0.1:443"
    assert conn.ca_pem == CA
    assert conn.headers() == {"Authorization": "Bearer tok-1"}


def test_in_cluster_brackets_an_ipv6_service_host(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    assert in_cluster(env, _service_account(tmp_path)).server == "https://[fd00::1]:443"


def test_outside_a_pod_in_cluster_says_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(KubeConnectionError, match="KUBERNETES_SERVICE_HOST"):
        in_cluster({}, tmp_path)


def test_a_rotated_token_is_read_again_after_a_minute(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("old")
    now = [0.0]
    token = TokenFile(path, clock=lambda: now[0])
    assert token() == "old"
    path.write_text("new")
    now[0] = 59.0
    assert token() == "old"
    now[0] = 60.0
    assert token() == "new"


def _kubeconfig(tmp_path: Path, user: str) -> Path:
    ca = base64.b64encode(CA.encode()).decode()
    path = tmp_path / "config"
    path.write_text(
        f"""apiVersion: v1
kind: Config
current-context: test
contexts:
- name: test
  context: {{cluster: c, user: u}}
- name: other
  context: {{cluster: c2, user: u}}
clusters:
- name: c
  cluster: {{server: "https://api.example:6443", certificate-authority-data: {ca}}}
- name: c2
  cluster: {{server: "https://other:6443/", tls-server-name: kubernetes}}
users:
- name: u
  user: {user}
"""
    )
    return path


def test_a_kubeconfig_token_and_ca(tmp_path: Path) -> None:
    conn = kubeconfig(_kubeconfig(tmp_path, "{token: abc}"))
    assert (conn.server, conn.ca_pem) == ("https://api.example:6443", CA)
    assert conn.headers() == {"Authorization": "Bearer abc"}
    assert conn.source.endswith("(context test)")


def test_a_kubeconfig_context_by_name_with_a_token_file(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("from-file\n")
    conn = kubeconfig(_kubeconfig(tmp_path, "{tokenFile: tok}"), context="other")
    assert conn.server == "https://other:6443"
    assert conn.tls_server_name == "kubernetes"
    assert conn.headers() == {"Authorization": "Bearer from-file"}


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ("{exec: {command: aws}}", "exec or auth-provider plugin"),
        ("{auth-provider: {name: gcp}}", "exec or auth-provider plugin"),
    ],
)
def test_a_plugin_is_refused_naming_it(tmp_path: Path, user: str, message: str) -> None:
    with pytest.raises(KubeConnectionError, match=message):
        kubeconfig(_kubeconfig(tmp_path, user))


def test_a_missing_context_or_plain_http_is_refused(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path, "{token: abc}")
    with pytest.raises(KubeConnectionError, match="no context named 'nope'"):
        kubeconfig(path, context="nope")
    path.write_text(path.read_text().replace("https://api.example", "http://api.example"))
    with pytest.raises(KubeConnectionError, match="must be https://"):
        kubeconfig(path)
    with pytest.raises(KubeConnectionError, match="No such file"):
        kubeconfig(tmp_path / "absent")
