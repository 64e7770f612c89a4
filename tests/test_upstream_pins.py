"""testbed/upstream: the pins are what they say, and a refusal is read right."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import upstream
from testbed.upstream import calico
from testbed.upstream.goerrors import why_failed


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
    refused, why = why_failed(GO_REFUSED)
    assert refused
    assert why == (
        "the Go module proxy refused github.com/projectcalico/calico@"
        "v1.11.0-cni-plugin.0.20260820173107-94bd1d5b0e04: 403 Forbidden"
        " (server response: This module version is not available.)"
    )


def test_a_compile_error_is_a_failure_not_a_refusal() -> None:
    stderr = "go: downloading x v1\n# pkg\n./a.go:3:1: undefined: y\n"
    assert why_failed(stderr) == (False, "./a.go:3:1: undefined: y")


def test_a_binary_not_pinned_is_named() -> None:
    with pytest.raises(upstream.UnavailableError, match="calico-felix-v9 is not one of the pinned"):
        upstream.binary("calico-felix-v9")


def test_without_go_the_reason_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream, "_go", lambda: None)
    with pytest.raises(upstream.UnavailableError, match="no go command on PATH"):
        upstream.binary(f"kube-apiserver-{upstream.K8S}")
    with pytest.raises(upstream.UnavailableError):
        list(upstream.build())


# --- Calico from its source archives ------------------------------------------

COMMIT = "94bd1d5b0e04459d4d1c83653e0335a9201248b8"


def _archive(folder: Path, label: str, *, commit: str = COMMIT) -> str:
    """A tiny ``git archive``-like tarball (pax comment = commit); returns its SHA256."""
    path = folder / f"calico-{label}.tar.xz"
    member = tarfile.TarInfo(f"calico-{label}/go.mod")
    body = b"module github.com/projectcalico/calico\n"
    member.size, member.mtime = len(body), 1_787_247_067  # 2026-08-20T17:31:07Z
    with tarfile.open(
        path, "w:xz", format=tarfile.PAX_FORMAT, pax_headers={"comment": commit}
    ) as tar:
        tar.addfile(member, io.BytesIO(body))
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def archives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    lines = [
        f"{_archive(tmp_path, label)}  calico-{label}.tar.xz"
        for label in ("v3.31.7", "master-87c15906")
    ]
    (tmp_path / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("DATAPLANE_CALICO_ARCHIVES", str(tmp_path))
    calico.archives.cache_clear()
    yield tmp_path
    calico.archives.cache_clear()


def test_the_archives_are_the_ones_sha256sums_lists(archives: Path) -> None:
    assert [a.label for a in calico.archives()] == ["v3.31.7", "master-87c15906"]
    assert calico.archive("master").label == "master-87c15906"  # a label's prefix
    assert calico.archive("v3.31.7").is_tag and not calico.archive("master").is_tag
    with pytest.raises(
        calico.ArchiveError, match=re.escape("no single Calico archive for 'v3.32.1'")
    ):
        calico.archive("v3.32.1")


def test_a_release_is_stamped_as_calicos_release_build_stamps_it(archives: Path) -> None:
    """Commit and date come from the archive itself: git archive's pax comment and mtimes.

    Both layouts' variables are set: pkg/buildinfo (v3.31 on) and each
    component's own (v3.30: felix/buildinfo, calicoctl's commands, main).
    """
    stamps = calico.archive("v3.31.7").ldflags().removeprefix("-X ").split(" -X ")
    calico_ = "github.com/projectcalico/calico"
    for stamp in (
        f"{calico_}/pkg/buildinfo.Version=v3.31.7",
        f"{calico_}/pkg/buildinfo.GitRevision={COMMIT}",
        f"{calico_}/pkg/buildinfo.BuildDate=2026-08-20T17:31:07Z",
        f"{calico_}/felix/buildinfo.GitVersion=v3.31.7",
        f"{calico_}/calicoctl/calicoctl/commands.GIT_REVISION={COMMIT[:7]}",
        "main.VERSION=v3.31.7",
    ):
        assert stamp in stamps
    assert calico.archive("master").ldflags().count("=master-87c15906") == 7


def test_an_archive_that_is_not_the_listed_one_is_not_built(archives: Path) -> None:
    item = calico.archive("v3.31.7")
    _archive(archives, "v3.31.7", commit="0" * 40)  # same name, other bytes
    folder, why = calico.build_archive(item, archives / "cache", "go-not-run", "go1.26.8")
    assert why is not None and "is not the" in why and "SHA256SUMS lists" in why
    assert not (folder / "bin").exists()


def test_a_listed_archive_that_is_missing_is_named(archives: Path) -> None:
    (archives / "calico-v3.31.7.tar.xz").unlink()
    with pytest.raises(
        calico.ArchiveError, match=re.escape("calico-v3.31.7.tar.xz is listed in SHA256SUMS")
    ):
        calico.archives()


def test_the_cache_key_follows_the_checksum_the_go_version_and_the_recipe(
    archives: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    item = calico.archive("v3.31.7")
    same = item.folder(Path("/c"), "go1.26.8")
    assert same == item.folder(Path("/c"), "go1.26.8")
    assert same != item.folder(Path("/c"), "go1.27.0")
    other = calico.Archive(item.label, item.path, "0" * 64)
    assert same != other.folder(Path("/c"), "go1.26.8")
    # A change in how it is built (another stamped variable) builds again.
    monkeypatch.setattr(calico, "STAMPS", (*calico.STAMPS, ("main.OTHER", "version")))
    assert same != item.folder(Path("/c"), "go1.26.8")
