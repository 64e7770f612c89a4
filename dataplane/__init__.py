"""dataplane: a Felix-compatible node dataplane driver.

The public surface (pinned by tests/test_public_api.py):

* :class:`Dataplane` -- the engine and embedding API (``send_message``,
  ``recv_message``, ``register_manager``, ``run``).
* :class:`ThreadedDataplane` -- the same for programs that are not async.
* :class:`SimPlatform` -- the in-memory platform.
* :class:`Config`, :func:`parse_config` -- typed configuration.
* :mod:`dataplane.wire.msglog` helpers -- build, write and read message logs.
* the error tree (:mod:`dataplane.errors`).
* ``pb`` -- the generated protobuf module for building messages.
"""

from dataplane.config import Config, parse_config
from dataplane.core.loop import Dataplane
from dataplane.embed import ThreadedDataplane
from dataplane.errors import (
    ConfigError,
    DataplaneError,
    InputError,
    PlatformUnavailableError,
    ProgrammingError,
    ProtocolError,
)
from dataplane.managers import Manager
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.msglog import build_log, read_log, write_log

__all__ = [
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
