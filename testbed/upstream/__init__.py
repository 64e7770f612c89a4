"""The real upstream peers, built and cached: Kubernetes from the Go module proxy,
Calico from its source archives.

What Felix and Kubernetes do is taken from running them. Kubernetes and
etcd: each folder here is a small Go module of ours (``go.mod``, ``go.sum``
where one can be made, and a ``tools.go`` naming the main packages; no
upstream code is copied) pinning one upstream release. :func:`build`
compiles its binaries with ``CGO_ENABLED=0``, as upstream's release builds
do, into a cache outside the work tree keyed by the module's files and the
Go version, so a second run costs nothing. :func:`binary` finds a built one
for a test, or says why there is none (no Go, not built yet, or the module
proxy refused a module: its exact error), which the test then gives as its
skip reason. Calico (calico-node, calico-felix, calicoctl, the CNI
plugin and calico-ipam) is built from the archives in ``../shared/upstream/``
(:mod:`testbed.upstream.calico`): the proxy refuses Calico's module.

``python -m testbed.upstream`` (``make upstream``) builds the Kubernetes
pins and the Calico releases the tests run (the pinned one and the newest;
``--all-releases`` every archive) and prints one line per binary, ``NAME
PATH``; what could not be built is one line on stderr, ``NAME: not built:
<why>``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from testbed.upstream import calico
from testbed.upstream.goerrors import why_failed

__all__ = [
    "MODULES",
    "Binary",
    "Module",
    "Outcome",
    "UnavailableError",
    "binary",
    "build",
    "cache_root",
    "calico_releases",
]

HERE = Path(__file__).resolve().parent
_MODULE_FILES = ("go.mod", "go.sum", "tools.go")


class UnavailableError(Exception):
    """No binary of that name here; the text is the reason, for a skip."""


@dataclass(frozen=True)
class Binary:
    name: str  # as tests and `make upstream` call it, release included
    package: str  # the Go main package


@dataclass(frozen=True)
class Module:
    folder: str  # under testbed/upstream/
    binaries: tuple[Binary, ...]
    ldflags: str = ""  # what upstream's release build stamps in (versions)

    @property
    def path(self) -> Path:
        return HERE / self.folder


K8S = "v1.33.13"  # the release Calico v3.31.7's go.mod requires
_K8S_MAJOR, _K8S_MINOR, _ = K8S[1:].split(".")
ETCD = "v3.5.21"  # the etcd that k8s.io/kubernetes v1.33.13 pins

MODULES: tuple[Module, ...] = (
    Module(
        f"kubernetes-{K8S}",
        (
            Binary(f"kube-apiserver-{K8S}", "k8s.io/kubernetes/cmd/kube-apiserver"),
            Binary(
                f"kube-controller-manager-{K8S}", "k8s.io/kubernetes/cmd/kube-controller-manager"
            ),
            Binary(f"kube-proxy-{K8S}", "k8s.io/kubernetes/cmd/kube-proxy"),
            Binary(f"etcd-{ETCD}", "go.etcd.io/etcd/server/v3"),
        ),
        # As hack/lib/version.sh stamps a release build, so that /version
        # and the binaries' --version say which release this is.
        ldflags=" ".join(
            f"-X k8s.io/component-base/version.{key}={value}"
            for key, value in (
                ("gitVersion", K8S),
                ("gitMajor", _K8S_MAJOR),
                ("gitMinor", _K8S_MINOR),
                ("gitTreeState", "clean"),
            )
        ),
    ),
)


def cache_root() -> Path:
    """Where built binaries live: outside the work tree, kept across runs."""
    explicit = os.environ.get("DATAPLANE_UPSTREAM_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dataplane-upstream"


def _go() -> str | None:
    return shutil.which("go")


@functools.cache
def _go_version(go: str) -> str:
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _key(module: Module, go_version: str) -> str:
    digest = hashlib.sha256(f"{go_version}\0{module.ldflags}".encode())
    for name in _MODULE_FILES:
        path = module.path / name
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes() if path.exists() else b"(none)")
    return digest.hexdigest()[:16]


def _folder(module: Module, go_version: str) -> Path:
    return cache_root() / f"{module.folder}-{_key(module, go_version)}"


def _out_name(package: str) -> str:
    """The file ``go build -o DIR`` writes for a main package (major suffix dropped)."""
    parts = package.split("/")
    if re.fullmatch(r"v[0-9]+", parts[-1]):
        parts.pop()
    return parts[-1]


@dataclass(frozen=True)
class Outcome:
    name: str  # a module's folder, or calico-<label>
    binaries: tuple[str, ...]  # what it builds
    built: dict[str, Path]  # name -> path
    failed: str | None  # why nothing was built
    refused: bool  # the proxy refused a module (expected here; not a build error)


def _build_module(module: Module, go: str, go_version: str) -> Outcome:
    folder = _folder(module, go_version)
    bin_dir = folder / "bin"
    names = tuple(b.name for b in module.binaries)
    wanted = {b.name: bin_dir / b.name for b in module.binaries}
    if all(p.exists() for p in wanted.values()):
        return Outcome(module.folder, names, wanted, None, False)
    with tempfile.TemporaryDirectory(prefix="upstream-") as tmp:
        work = Path(tmp)
        for name in _MODULE_FILES:
            if (module.path / name).exists():
                shutil.copy(module.path / name, work / name)
        out = work / "out"
        out.mkdir()
        env = dict(os.environ, CGO_ENABLED="0")
        # With a go.sum the build may not change a pin; without one (a module
        # the proxy refuses cannot have one) go resolves, and says what fails.
        mod = "-mod=readonly" if (work / "go.sum").exists() else "-mod=mod"
        packages = [b.package for b in module.binaries]
        result = subprocess.run(
            [go, "build", mod, "-trimpath", "-ldflags", module.ldflags, "-o", str(out), *packages],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        folder.mkdir(parents=True, exist_ok=True)
        refusal = folder / "not-built"
        if result.returncode != 0:
            refused, why = why_failed(result.stderr)
            refusal.write_text(why + "\n")
            return Outcome(module.folder, names, {}, why, refused)
        bin_dir.mkdir(exist_ok=True)
        for b in module.binaries:
            os.replace(out / _out_name(b.package), wanted[b.name])
        refusal.unlink(missing_ok=True)
    return Outcome(module.folder, names, wanted, None, False)


def calico_releases(every: bool = False) -> tuple[calico.Archive, ...]:
    """The Calico archives to build: the pinned release and the newest, or ``every`` one.

    Raises:
        UnavailableError: the archives are not there (the text says where).
    """
    try:
        if every:
            return calico.archives()
        return (calico.archive(calico.PINNED), calico.archive(calico.NEWEST))
    except calico.ArchiveError as exc:
        raise UnavailableError(str(exc)) from exc


def _build_calico(item: calico.Archive, go: str, go_version: str) -> Outcome:
    folder, why = calico.build_archive(item, cache_root(), go, go_version)
    wanted = calico.binaries(folder, item.label)
    names = tuple(wanted)
    refusal = folder / "not-built"
    if why is not None:
        folder.mkdir(parents=True, exist_ok=True)
        refusal.write_text(why + "\n")
        return Outcome(f"calico-{item.label}", names, {}, why, False)
    refusal.unlink(missing_ok=True)
    return Outcome(f"calico-{item.label}", names, wanted, None, False)


def build(
    modules: tuple[Module, ...] = MODULES, releases: tuple[calico.Archive, ...] | None = None
) -> Iterator[Outcome]:
    """Build every module and Calico release not yet cached; one outcome each, as each finishes.

    ``releases`` defaults to :func:`calico_releases` (the pinned and the newest).

    Raises:
        UnavailableError: there is no ``go`` on PATH, or no Calico archives.
    """
    go = _go()
    if go is None:
        raise UnavailableError("no go command on PATH")
    version = _go_version(go)
    if releases is None:
        releases = calico_releases()
    for module in modules:
        yield _build_module(module, go, version)
    for item in releases:
        yield _build_calico(item, go, version)


def _calico_binary(name: str) -> Path | None:
    """The cached Calico binary ``name`` (``calico-felix-v3.31.7``), None if no archive makes it.

    Raises:
        UnavailableError: not built (the text says why), or no go.
    """
    try:
        every = calico.archives()
    except calico.ArchiveError as exc:
        if name.startswith(("calico-", "calicoctl-")):
            raise UnavailableError(f"{name}: {exc}") from exc
        return None
    item = next((a for a in every if name in calico.binaries(Path(), a.label)), None)
    if item is None:
        return None
    folder = item.folder(cache_root(), _go_version(_need_go(name)))
    how = "make upstream" if item in calico_releases() else "make test-releases"
    return _cached(name, calico.binaries(folder, item.label)[name], folder, how)


def _need_go(name: str) -> str:
    go = _go()
    if go is None:
        raise UnavailableError(f"{name}: no go command on PATH to build it with")
    return go


def _cached(name: str, path: Path, folder: Path, how: str) -> Path:
    """``path`` if built; else why not (the build's refusal, or not built yet)."""
    if path.exists():
        return path
    refusal = folder / "not-built"
    if refusal.exists():
        raise UnavailableError(f"{name}: not built: {refusal.read_text().strip()}")
    raise UnavailableError(f"{name}: not built yet ({how} builds it)")


def binary(name: str) -> Path:
    """The cached binary ``name`` (``kube-apiserver-v1.33.13``, ``calico-felix-v3.31.7``).

    Raises:
        UnavailableError: its text says why (no Go, not built yet, or refused).
    """
    found = _calico_binary(name)
    if found is not None:
        return found
    module = next((m for m in MODULES if any(b.name == name for b in m.binaries)), None)
    if module is None:
        raise UnavailableError(f"{name} is not one of the pinned upstream binaries")
    folder = _folder(module, _go_version(_need_go(name)))
    return _cached(name, folder / "bin" / name, folder, "make upstream")
