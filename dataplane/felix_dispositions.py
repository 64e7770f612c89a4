"""The kinds of answer the driver gives for a Felix setting or message field.

:mod:`dataplane.felix_settings` says which answer each of Felix's settings
gets, :mod:`dataplane.felix_fields` each field of its messages; both
tables are made of these values, and ``docs/felix-parity.md`` is written
from them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Disposition", "Honoured", "NotForPlatform", "NotNeeded", "Refused", "RefusedSetting"]


@dataclass(frozen=True, slots=True)
class Honoured:
    """The driver acts on it as Felix does; ``proof`` names the test."""

    proof: str
    note: str = ""


@dataclass(frozen=True, slots=True)
class NotForPlatform:
    """It belongs to a part of Felix this driver is not."""

    why: str


@dataclass(frozen=True, slots=True)
class NotNeeded:
    """The driver has nothing to set: what the key tunes it does another way (``why``)."""

    why: str


@dataclass(frozen=True, slots=True)
class Refused:
    """Felix's Linux dataplane acts on it; this driver does not (``why``).

    ``default`` is Felix's (held to ``config_params.go`` by a test). A value
    is harmless when ``harmless`` says so, or, without it, when it equals
    the default (compared without case and surrounding space).
    """

    why: str
    default: str
    harmless: Callable[[str], bool] | None = None
    behaves_as: str | None = None  # the driver does what Felix does with this value

    def refuses(self, value: str) -> bool:
        if self.harmless is not None:
            return not self.harmless(value)
        same = self.default if self.behaves_as is None else self.behaves_as
        return value.strip().lower() != same.strip().lower()


Disposition = Honoured | NotForPlatform | NotNeeded | Refused


@dataclass(frozen=True, slots=True)
class RefusedSetting:
    """One key Felix sent with a value the driver refuses."""

    key: str
    value: str
    why: str

    def line(self) -> str:
        return f"config[{self.key}]={self.value!r} refused: {self.why}"
