"""testbed/upstream: the pins are what they say, and a refusal is read right."""

from __future__ import annotations

import re

import pytest

from testbed import upstream


@pytest.mark.parametrize("module", upstream.MODULES, ids=lambda m: m.folder)
def test_tools_go_names_exactly_the_binaries_built(module: upstream.Module) -> None:
    tools = (module.path / "tools.go").read_text()
    imported = set(re.findall(r'_ "([^"]+)"', tools))
    assert imported == {b.package for b in module.binaries}
    assert "//go:build tools" in tools


@pytest.mark.parametrize("module", upstream.MODULES, ids=lambda m: m.folder)
def test_go_mod_holds_only_pins(module: upstream.Module) -> None:
    """require and replace lines only: no code of upstream's is copied here."""
    files = {p.name for p in module.path.iterdir()}
    assert files <= {"go.mod", "go.sum", "tools.go"}
    text = (module.path / "go.mod").read_text()
    assert set(re.findall(r"^(\w+)", text, re.M)) == {"module", "go", "require", "replace"}


def test_the_kubernetes_pins_agree_with_the_release_names() -> None:
    (module,) = [m for m in upstream.MODULES if m.folder.startswith("kubernetes-")]
    text = (module.path / "go.mod").read_text()
    assert f"k8s.io/kubernetes {upstream.K8S}\n" in text
    assert f"go.etcd.io/etcd/server/v3 {upstream.ETCD}\n" in text
    staging = re.findall(r"^\t(k8s\.io/\S+) => \S+ (\S+)$", text, re.M)
    assert staging and {v for _, v in staging} == {"v0" + upstream.K8S[2:]}
    assert f"-X k8s.io/component-base/version.gitVersion={upstream.K8S}" in module.ldflags


_VERSION = "v1.11.0-cni-plugin.0.20260820173107-94bd1d5b0e04"
GO_REFUSED = (
    f"go: downloading github.com/projectcalico/calico {_VERSION}\n"
    f"github.com/projectcalico/calico@{_VERSION}: reading"
    f" https://proxy.example/github.com/projectcalico/calico/@v/{_VERSION}.zip: 403 Forbidden\n"
    "\tserver response: This module version is not available.\n"
)


def test_a_proxy_refusal_is_one_line_naming_the_module_and_the_answer() -> None:
    refused, why = upstream._why_failed(GO_REFUSED)
    assert refused
    assert why == (
        "the Go module proxy refused github.com/projectcalico/calico@"
        "v1.11.0-cni-plugin.0.20260820173107-94bd1d5b0e04: 403 Forbidden"
        " (server response: This module version is not available.)"
    )


def test_a_compile_error_is_a_failure_not_a_refusal() -> None:
    stderr = "go: downloading x v1\n# pkg\n./a.go:3:1: undefined: y\n"
    assert upstream._why_failed(stderr) == (False, "./a.go:3:1: undefined: y")


def test_a_binary_not_pinned_is_named() -> None:
    with pytest.raises(upstream.UnavailableError, match="calico-felix-v9 is not one of the pinned"):
        upstream.binary("calico-felix-v9")


def test_without_go_the_reason_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream, "_go", lambda: None)
    with pytest.raises(upstream.UnavailableError, match="no go command on PATH"):
        upstream.binary(f"kube-apiserver-{upstream.K8S}")
    with pytest.raises(upstream.UnavailableError):
        list(upstream.build())
