"""Real-kernel tests: the topology fixture, and every driver test on both backends.

Each test that runs the driver (``dataplane-driver``, through the Felix
harness) runs twice: on iptables (Felix's default, ``NFTablesMode``
Disabled) and on native nftables (``DATAPLANE_NFTABLES_MODE=enabled`` in
the environment the driver inherits, as an operator would set it). Tests
that choose the backend themselves, or never run the driver, are marked
``own_backend`` and run once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.topology import Topology
from tests.kernel.marks import KERNEL_UNAVAILABLE

BACKENDS = ("iptables", "nftables")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "kernel_backend" in metafunc.fixturenames and (
        metafunc.definition.get_closest_marker("own_backend") is None
    ):
        metafunc.parametrize("kernel_backend", BACKENDS, indirect=True)


@pytest.fixture(autouse=True)
def kernel_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The backend the drivers this test starts program (see the module doc)."""
    backend: str = getattr(request, "param", "iptables")
    if backend == "nftables":
        monkeypatch.setenv("DATAPLANE_NFTABLES_MODE", "enabled")
    else:
        monkeypatch.delenv("DATAPLANE_NFTABLES_MODE", raising=False)
    return backend


@pytest.fixture
def topology() -> Iterator[Topology]:
    """A fresh :class:`Topology`, always torn down; skips when the kernel is off-limits."""
    if KERNEL_UNAVAILABLE is not None:
        pytest.skip(KERNEL_UNAVAILABLE)
    with Topology() as topo:
        yield topo
