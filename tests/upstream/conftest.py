"""Tests against the real upstream control plane (testbed/control_plane.py).

The binaries come from ``make upstream`` (``make test`` runs it first); a
test that needs one that is missing skips with the builder's own words:
no Go, not built yet, or the module proxy's refusal.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.control_plane import ControlPlane, unavailable
from testbed.topology import Topology
from tests.kernel.marks import KERNEL_UNAVAILABLE


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd, kube-apiserver and kube-controller-manager, shared by a module's tests."""
    if KERNEL_UNAVAILABLE is not None:
        pytest.skip(KERNEL_UNAVAILABLE)
    why = unavailable(controller_manager=True)
    if why is not None:
        pytest.skip(why)
    workdir = Path(tmp_path_factory.mktemp("control-plane"))
    with Topology() as topo, ControlPlane(topo, workdir, controller_manager=True) as cp:
        yield cp
