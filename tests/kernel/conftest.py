"""Real-kernel tests: the topology fixture for every test in this folder."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.topology import Topology
from tests.kernel.marks import KERNEL_UNAVAILABLE


@pytest.fixture
def topology() -> Iterator[Topology]:
    """A fresh :class:`Topology`, always torn down; skips when the kernel is off-limits."""
    if KERNEL_UNAVAILABLE is not None:
        pytest.skip(KERNEL_UNAVAILABLE)
    with Topology() as topo:
        yield topo
