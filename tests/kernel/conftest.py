"""Real-kernel tests: the topology fixture for every test in this folder."""

from tests.kernel.topology import topology as topology  # noqa: PLC0414 - the fixture
