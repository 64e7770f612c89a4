"""Pins the package's public surface: changing it must be deliberate."""

from __future__ import annotations

import dataplane
from dataplane.core.loop import Dataplane


def test_public_names() -> None:
    assert sorted(dataplane.__all__) == [
        "Config",
        "ConfigError",
        "Dataplane",
        "DataplaneError",
        "InputError",
        "Manager",
        "PlatformUnavailableError",
        "ProgrammingError",
        "ProtocolError",
        "SimPlatform",
        "ThreadedDataplane",
        "build_log",
        "parse_config",
        "pb",
        "read_log",
        "write_log",
    ]
    for name in dataplane.__all__:
        assert hasattr(dataplane, name)


def test_embedding_methods() -> None:
    public = {n for n in vars(Dataplane) if not n.startswith("_")}
    assert public == {
        "register_manager",
        "managers_for",
        "send_message",
        "recv_message",
        "close_input",
        "drain_output",
        "in_sync",
        "last_apply_error",
        "run",
        "stop",  # SIGTERM: run() returns, the dataplane left as programmed
        "apply_abandoned",
        # Sources beside the messages (the Kubernetes API for services):
        # one that an embedder adds programs nothing until it has synced.
        "add_source",
        "changed",
    }
    # The services manager is reachable for health sources (set_backend_health).
    assert hasattr(Dataplane(dataplane.SimPlatform()), "services")


def test_error_tree() -> None:
    assert issubclass(dataplane.ProtocolError, dataplane.DataplaneError)
    assert issubclass(dataplane.ConfigError, dataplane.InputError)
    assert issubclass(dataplane.InputError, dataplane.DataplaneError)
    assert issubclass(dataplane.ProgrammingError, dataplane.DataplaneError)
    assert issubclass(dataplane.PlatformUnavailableError, dataplane.DataplaneError)
