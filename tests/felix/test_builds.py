"""The Calico binaries the suite runs say which release they are, as release builds do."""

from __future__ import annotations

import subprocess

import pytest

from testbed import upstream
from testbed.upstream import calico
from tests.felix.conftest import releases


@pytest.mark.parametrize("release", releases())
def test_felix_and_calicoctl_report_the_archive_s_release_and_commit(release: str) -> None:
    try:
        item = calico.archive(release)
        felix = upstream.binary(f"calico-felix-{item.label}")
        calicoctl = upstream.binary(f"calicoctl-{item.label}")
    except (upstream.UnavailableError, calico.ArchiveError) as exc:
        pytest.skip(str(exc))
    commit, when = item.provenance()
    said = subprocess.run([felix, "--version"], capture_output=True, text=True, check=True)
    lines = dict(line.split(":", 1) for line in said.stdout.splitlines() if ":" in line)
    assert {k.strip(): v.strip() for k, v in lines.items()} == {
        "Version": item.label,
        "Full git commit ID": commit,
        "Build date": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    ctl = subprocess.run([calicoctl, "version"], capture_output=True, text=True, check=False)
    assert f"Client Version:    {item.label}" in ctl.stdout
