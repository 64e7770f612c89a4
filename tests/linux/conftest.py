"""Fixtures of the Linux tests that need a kernel."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest


@pytest.fixture
def netns() -> Iterator[str]:
    """A throwaway network namespace (root only; skipped otherwise), deleted after."""
    if os.geteuid() != 0:
        pytest.skip("needs root for a network namespace")
    name = f"dptbl{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
