"""The one exception tree of the dataplane driver.

::

    DataplaneError                  base of everything we raise on purpose
    ├── ProtocolError               the input stream is malformed: fatal, exit 1
    ├── InputError                  one message is invalid: rejected, logged, skipped
    │   └── ConfigError             a ConfigUpdate value is invalid (names key and value)
    ├── ProgrammingError            applying desired state failed: retried with backoff
    └── PlatformUnavailableError    the platform asked for cannot run here: fatal at start

Lower libraries' errors (OSError, protobuf DecodeError, pyroute2 and
iptables failures) are translated into this tree at the boundary where they
happen, with the object concerned named, so that a log line is enough to act.
"""

from __future__ import annotations


class DataplaneError(Exception):
    """Base class of all errors the driver raises deliberately."""


class ProtocolError(DataplaneError):
    """The byte stream cannot be decoded; the driver must stop.

    Attributes:
        offset: byte offset in the input stream where the bad frame starts.
        frame_index: zero-based index of the bad frame.
        last_good_seq: sequence number of the last envelope decoded, or None.
    """

    def __init__(
        self, reason: str, *, offset: int, frame_index: int, last_good_seq: int | None
    ) -> None:
        self.reason = reason
        self.offset = offset
        self.frame_index = frame_index
        self.last_good_seq = last_good_seq
        last = "none" if last_good_seq is None else str(last_good_seq)
        super().__init__(
            f"malformed input at byte offset {offset} (frame {frame_index},"
            f" last good seq {last}): {reason}"
        )


class InputError(DataplaneError):
    """One message carries an invalid value; the message is rejected whole.

    The loop adds the sequence number and message type; the raiser supplies
    the field path, the offending value and why it is wrong.
    """

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"field {field}={value!r}: {reason}")

    def prefixed(self, prefix: str) -> InputError:
        """Return a copy whose field path is qualified by ``prefix``."""
        err = type(self).__new__(type(self))
        InputError.__init__(err, f"{prefix}.{self.field}", self.value, self.reason)
        return err


class ConfigError(InputError):
    """A configuration key has a value we cannot use."""


class ProgrammingError(DataplaneError):
    """Writing desired state to the kernel/HNS failed; pending state is kept."""


class PlatformUnavailableError(DataplaneError):
    """The platform cannot run on this host (no privilege, tools missing).

    Raised before anything is read, so the driver never reports a dataplane
    it cannot program; the message says what is missing.
    """
