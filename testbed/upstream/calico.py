"""Calico (Felix, calicoctl, the CNI plugin) built from its source archives.

The Go module proxy refuses ``github.com/projectcalico/calico`` at every
supported release, so Calico's source comes with the project's shared
files: ``../shared/upstream/`` holds ``git archive`` of projectcalico/calico
at each supported release, unchanged, with a ``SHA256SUMS`` beside them
(``DATAPLANE_CALICO_ARCHIVES`` names another folder). Everything else
Calico needs comes from the proxy.

For each archive :func:`build_archive` checks the file against
``SHA256SUMS`` first, unpacks it into the cache, and builds, with
``CGO_ENABLED=0`` and ``-trimpath``, the four main packages the test bed
runs (calico-node for its start-up and tunnel addresses, Felix, calicoctl,
the CNI plugin), stamped as Calico's release builds stamp them
(``lib.Makefile``: ``pkg/buildinfo`` Version, GitRevision, BuildDate)::

    <cache>/calico-<label>-<key>/src/              the unpacked tree (CRDs, config_params.go)
    <cache>/calico-<label>-<key>/bin/calico-node-<label>
    <cache>/calico-<label>-<key>/bin/calico-felix-<label>
    <cache>/calico-<label>-<key>/bin/calicoctl-<label>
    <cache>/calico-<label>-<key>/cni/calico         the CNI plugin; calico-ipam is the same
    <cache>/calico-<label>-<key>/cni/calico-ipam    binary, which acts by the name it runs as

The key hashes the archive's listed checksum, the Go version and the build
recipe (packages, stamped variables), so an unchanged archive costs nothing
the second time and a new Go or recipe builds again.
The archive's commit and date are read from the archive itself (``git
archive`` of a commit writes its id into the pax header, and every member's
time is the commit's), so nothing here restates them.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from testbed.upstream.goerrors import why_failed

__all__ = [
    "NEWEST",
    "PINNED",
    "Archive",
    "ArchiveError",
    "archive",
    "archives",
    "archives_dir",
]

REPO = Path(__file__).resolve().parents[2]
PINNED = "v3.31.7"  # the release the project is proven against first
NEWEST = "master"  # the archive whose label starts so: master's newest commit here
_NAME = re.compile(r"calico-(?P<label>[A-Za-z0-9.\-]+)\.tar\.xz")
_CALICO = "github.com/projectcalico/calico"
# (variable, value) the release builds stamp, v3.31 on and up to v3.30.
STAMPS = (
    (f"{_CALICO}/pkg/buildinfo.Version", "version"),
    (f"{_CALICO}/pkg/buildinfo.GitRevision", "commit"),
    (f"{_CALICO}/pkg/buildinfo.BuildDate", "date"),
    *(
        (f"{_CALICO}/{component}/buildinfo.{var}", value)
        for component in ("felix", "node")
        for var, value in (
            ("GitVersion", "version"),
            ("BuildDate", "date"),
            ("GitRevision", "commit"),
        )
    ),
    (f"{_CALICO}/node/pkg/lifecycle/startup.VERSION", "version"),
    (f"{_CALICO}/calicoctl/calicoctl/commands.VERSION", "version"),
    (f"{_CALICO}/calicoctl/calicoctl/commands.GIT_REVISION", "short"),
    (f"{_CALICO}/calicoctl/calicoctl/commands/common.VERSION", "version"),
    ("main.VERSION", "version"),
)
# Main packages, and the names their binaries get in bin/.
PACKAGES = {
    "calico-felix": "./felix/cmd/calico-felix",
    "calicoctl": "./calicoctl/calicoctl",
    "calico": "./cni-plugin/cmd/calico",
}


def node_package(src: Path) -> str:
    """calico-node's main package in a tree: its own up to v3.32, the unified ``calico`` after.

    From v3.33 ``node/cmd/calico-node`` is gone and calico-node's commands
    are ``calico component node ...`` of ``./cmd/calico``.
    """
    if any((src / "node" / "cmd" / "calico-node").glob("*.go")):
        return "./node/cmd/calico-node"
    return "./cmd/calico"


def node_commands(node: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(start-up, tunnel addresses once): the argv of each for the calico-node ``node``.

    ``node`` is ``bin/calico-node-<label>`` of a built folder; its source
    beside it says which command line it has.
    """
    if node_package(node.parent.parent / "src") == "./node/cmd/calico-node":
        return (str(node), "-startup"), (
            str(node),
            "-allocate-tunnel-addrs",
            "-allocate-tunnel-addrs-run-once",
        )
    base = (str(node), "component", "node")
    return (*base, "startup"), (*base, "allocate-tunnel-addrs", "--run-once")


class ArchiveError(Exception):
    """An archive is missing, unlisted, or does not match its checksum; says which."""


def archives_dir() -> Path:
    explicit = os.environ.get("DATAPLANE_CALICO_ARCHIVES")
    return Path(explicit) if explicit else REPO.parent / "shared" / "upstream"


@dataclass(frozen=True)
class Archive:
    """One source archive: ``calico-<label>.tar.xz`` and its listed SHA256."""

    label: str  # v3.31.7, master-87c15906, ...
    path: Path
    sha256: str

    @property
    def is_tag(self) -> bool:
        return re.fullmatch(r"v[0-9]+\.[0-9]+\.[0-9]+", self.label) is not None

    def folder(self, cache: Path, go_version: str) -> Path:
        """Keyed by the archive, the Go version and how it is built (a new recipe builds anew)."""
        recipe = repr((sorted(PACKAGES.items()), STAMPS))
        key = hashlib.sha256(f"{self.sha256}\0{go_version}\0{recipe}".encode()).hexdigest()[:16]
        return cache / f"calico-{self.label}-{key}"

    def verify(self) -> None:
        """Raises ArchiveError when the file's SHA256 is not the listed one."""
        digest = hashlib.sha256()
        with self.path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != self.sha256:
            raise ArchiveError(
                f"{self.path.name}: SHA256 {digest.hexdigest()} is not the"
                f" {self.sha256} SHA256SUMS lists"
            )

    def provenance(self) -> tuple[str, datetime]:
        """The commit ``git archive`` wrote into the pax header, and its time."""
        with tarfile.open(self.path, mode="r|xz") as tar:
            first = tar.next()
            commit = tar.pax_headers.get("comment", "")
        if first is None or not re.fullmatch(r"[0-9a-f]{40}", commit):
            raise ArchiveError(f"{self.path.name}: no commit id in its pax header")
        return commit, datetime.fromtimestamp(first.mtime, UTC)

    def ldflags(self) -> str:
        """As Calico's release builds stamp the version, whichever layout the tree has.

        From v3.31 ``lib.Makefile`` stamps ``pkg/buildinfo`` for every
        binary; up to v3.30 each component's Makefile stamps its own
        variables (Felix's and calico-node's ``buildinfo.GitVersion``,
        calicoctl's ``commands.VERSION``, the CNI plugin's ``main.VERSION``).
        The linker ignores a ``-X`` for a variable a binary lacks, so both
        sets go to every build. The version is ``git describe``'s: a tag's
        archive is its tag; a branch's (no tag to describe from, no history
        in an archive) is its label, which names branch and commit.
        """
        commit, when = self.provenance()
        values = {
            "version": self.label,
            "commit": commit,
            "short": commit[:7],  # calicoctl's GIT_REVISION: git rev-parse --short
            "date": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        return " ".join(f"-X {var}={values[value]}" for var, value in STAMPS)


@functools.cache
def archives() -> tuple[Archive, ...]:
    """Every archive SHA256SUMS lists, in its order.

    Raises:
        ArchiveError: no SHA256SUMS, or a listed archive is missing.
    """
    folder = archives_dir()
    sums = folder / "SHA256SUMS"
    if not sums.exists():
        raise ArchiveError(f"no Calico source archives: {sums} does not exist")
    found: list[Archive] = []
    for line in sums.read_text().splitlines():
        if not line.strip():
            continue
        digest, name = line.split(maxsplit=1)
        match = _NAME.fullmatch(name.lstrip("*"))
        if match is None:
            continue
        path = folder / name.lstrip("*")
        if not path.exists():
            raise ArchiveError(f"{path} is listed in SHA256SUMS but missing")
        found.append(Archive(match["label"], path, digest.lower()))
    return tuple(found)


def archive(release: str) -> Archive:
    """The archive of ``release``: its label, or a label's prefix (``master``).

    Raises:
        ArchiveError: none matches, or more than one does.
    """
    every = archives()
    exact = [a for a in every if a.label == release]
    matches = exact or [a for a in every if a.label.startswith(release + "-")]
    if len(matches) != 1:
        labels = ", ".join(a.label for a in every)
        raise ArchiveError(f"no single Calico archive for {release!r} (have {labels})")
    return matches[0]


def binaries(folder: Path, label: str) -> dict[str, Path]:
    """Name -> path of what a built archive's folder holds (built or not)."""
    return {
        f"calico-node-{label}": folder / "bin" / f"calico-node-{label}",
        f"calico-felix-{label}": folder / "bin" / f"calico-felix-{label}",
        f"calicoctl-{label}": folder / "bin" / f"calicoctl-{label}",
        f"calico-{label}": folder / "cni" / "calico",
        f"calico-ipam-{label}": folder / "cni" / "calico-ipam",
    }


def build_archive(item: Archive, cache: Path, go: str, go_version: str) -> tuple[Path, str | None]:
    """Build ``item`` into its cache folder unless it is there; (folder, why not built)."""
    folder = item.folder(cache, go_version)
    wanted = binaries(folder, item.label)
    if all(p.exists() for p in wanted.values()):
        return folder, None
    try:
        item.verify()
        ldflags = item.ldflags()
    except (ArchiveError, tarfile.TarError, OSError) as exc:
        return folder, str(exc)
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "src"
    if not (src / "go.mod").exists():
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir()
        unpack = subprocess.run(
            ["tar", "-xJf", str(item.path), "-C", str(src), "--strip-components=1"],
            capture_output=True,
            text=True,
            check=False,
        )
        if unpack.returncode != 0:
            shutil.rmtree(src, ignore_errors=True)
            return folder, f"tar: {unpack.stderr.strip()}"
    # GOTOOLCHAIN=local: an archive that needs a newer Go says so, rather
    # than the go command fetching a toolchain of its own.
    env = dict(os.environ, CGO_ENABLED="0", GOTOOLCHAIN="local", GOFLAGS="-mod=readonly")
    packages = {**PACKAGES, "calico-node": node_package(src)}
    with tempfile.TemporaryDirectory(prefix="out-", dir=folder) as tmp:
        out = Path(tmp)
        # One build per binary: ./cmd/calico (calico-node from v3.33) and
        # the CNI plugin would both be "calico" in one output directory.
        for name, package in packages.items():
            result = subprocess.run(
                [go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(out / name), package],
                cwd=src,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            if result.returncode != 0:
                return folder, why_failed(result.stderr)[1]
        (folder / "bin").mkdir(exist_ok=True)
        (folder / "cni").mkdir(exist_ok=True)
        os.replace(out / "calico-node", wanted[f"calico-node-{item.label}"])
        os.replace(out / "calico-felix", wanted[f"calico-felix-{item.label}"])
        os.replace(out / "calicoctl", wanted[f"calicoctl-{item.label}"])
        ipam = wanted[f"calico-ipam-{item.label}"]
        ipam.unlink(missing_ok=True)
        os.link(out / "calico", ipam)  # one binary, two names (it acts by its name)
        os.replace(out / "calico", wanted[f"calico-{item.label}"])
    return folder, None
