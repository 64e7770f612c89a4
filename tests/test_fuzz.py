"""A little fuzzing on every CI run: ``fuzz/run.py`` over every target, a few seconds each.

The long runs (minutes per target) and what they found are in
``fuzz/README.md``; this keeps the harnesses working and catches the shallow
findings a change brings. The harnesses run in subprocesses: atheris is
imported only there, and they take over the ``dataplane`` logger.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz import make_corpus

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ("frames", "envelopes", "managers")
SECONDS_PER_TARGET = 2  # plus ~3 s each to start: instrumenting dataplane.*, loading seeds


def _atheris_missing() -> str | None:
    """Why atheris cannot be imported, or None if it can."""
    proc = subprocess.run(
        [sys.executable, "-c", "import atheris"], capture_output=True, text=True, check=False
    )
    if proc.returncode == 0:
        return None
    last = (proc.stderr.strip().splitlines() or ["?"])[-1]
    return f"atheris cannot be imported ({last}); pip install atheris==3.0.0 to fuzz"


@pytest.mark.slow
def test_every_target_fuzzes_without_a_finding(tmp_path: Path) -> None:
    missing = _atheris_missing()
    if missing:
        pytest.skip(missing)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fuzz.run",
            f"--seconds={SECONDS_PER_TARGET}",
            f"--work={tmp_path / 'work'}",
            f"--findings={tmp_path / 'findings'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    for target in TARGETS:
        found = re.search(rf"^{target}: (\d+) executions .*: no crash$", proc.stdout, re.M)
        assert found and int(found[1]) > 0, report


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_every_seed_passes_its_target(target: str) -> None:
    # Plain Python, no atheris: the seeds are valid inputs that find nothing.
    proc = subprocess.run(
        [sys.executable, "-m", "fuzz.replay", "-q", target, f"fuzz/corpus/{target}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_committed_seeds_are_what_make_corpus_writes() -> None:
    want = make_corpus.seeds()
    for target, files in want.items():
        directory = make_corpus.CORPUS / target
        have = {p.name: p.read_bytes() for p in directory.iterdir()}
        assert have.keys() == files.keys(), f"run python fuzz/make_corpus.py ({target})"
        stale = sorted(name for name, data in files.items() if have[name] != data)
        assert not stale, f"run python fuzz/make_corpus.py ({target}: {stale[:5]})"
