"""Skip marks for the real-kernel tests."""

from __future__ import annotations

import pytest

from testbed.topology import kernel_unavailable

_WHY = kernel_unavailable()
KERNEL_UNAVAILABLE = None if _WHY is None else f"real-kernel tests need namespaces: {_WHY}"
requires_root = pytest.mark.skipif(KERNEL_UNAVAILABLE is not None, reason=KERNEL_UNAVAILABLE or "")
