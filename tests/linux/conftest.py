"""Fixtures of the Linux tests that need a kernel."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def throwaway_netns(prefix: str) -> Iterator[str]:
    """A network namespace of our own (root only; skipped otherwise), deleted after."""
    if os.geteuid() != 0:
        pytest.skip("needs root for a network namespace")
    name = f"{prefix}{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture
def netns() -> Iterator[str]:
    """A throwaway network namespace for one test."""
    with throwaway_netns("dptbl") as name:
        yield name


@pytest.fixture(scope="module")
def module_netns() -> Iterator[str]:
    """A throwaway network namespace shared by one module's tests (and examples)."""
    with throwaway_netns("dpmod") as name:
        yield name
