"""Which Felix release is talking: its wire format, told from what arrives.

Felix starts an external driver with no arguments, so nothing says which
release it is; yet the supported releases encode some messages differently
(facts from ``felix/proto/felixbackend.proto`` at each release tag and
``felix/calc/event_sequencer.go``):

======================  ===================================================
up to v3.31             ``TierInfo`` policies are ``repeated string`` names
                        (``"<namespace>/<name>"`` when namespaced, with the
                        ``knp.default.`` and ``staged:`` name prefixes);
                        ``PolicyID`` is ``{tier = 1, name = 2}``.
from v3.32              ``TierInfo`` policies are ``repeated PolicyID``
                        ``{name = 2, namespace = 3, kind = 4}``; the tier is
                        ``Policy.tier`` (8).
v3.30.1 to v3.30.7      ``WorkloadEndpoint`` 14 is an enum (a message from
                        v3.31).
up to v3.32             host addresses come split: ``HostMetadataUpdate``
                        (14) holds the bare IPv4 address, 35/36 the IPv6
                        one, 37/38 both in CIDR form with AS number and
                        labels.
v3.33 (master)          only 14/18, with everything 37/38 held.
v3.29 and older         ``RouteUpdate.type`` (1) where v3.30 has ``types``
                        (12), renumbered: refused.
======================  ===================================================

Decoding needs two answers, *policy names as strings?* and *split host
messages?*, so three formats: v3.30-v3.31, v3.32 and v3.33. The
:class:`ReleaseDetector` keeps the set of releases still consistent with
everything seen, narrows it with each piece of :class:`Evidence`, says once
in the log which format it decoded as and why, and refuses a stream whose
evidence contradicts itself (or the operator's ``--felix-release``), or that
comes from a release older than v3.30. Once the stream itself has settled
the format, a message that contradicts it is :class:`ContradictionError`: that
one message is refused and the stream goes on (a real Felix that sent one
odd frame must not take the node's driver down with it, nor Felix after
it). Messages that carry no evidence (most of them) cost nothing.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable

__all__ = [
    "LEGACY_HOSTS",
    "LEGACY_POLICY",
    "ContradictionError",
    "Evidence",
    "FormatError",
    "Release",
    "ReleaseDetector",
    "parse_release",
]

log = logging.getLogger(__name__)


class Release(enum.Enum):
    V3_30 = "v3.30"
    V3_31 = "v3.31"
    V3_32 = "v3.32"
    V3_33 = "v3.33"


ALL = frozenset(Release)
# Releases whose TierInfo carries policy names as strings.
LEGACY_POLICY = frozenset({Release.V3_30, Release.V3_31})
# Releases that split host addresses over HostMetadataUpdate and 35-38.
LEGACY_HOSTS = frozenset({Release.V3_30, Release.V3_31, Release.V3_32})

_ALIASES = {"master": Release.V3_33}


class FormatError(ValueError):
    """The stream is in no supported Felix format; the text says what was seen."""


class ContradictionError(FormatError):
    """One message contradicts a format the stream has settled: refuse it alone.

    The text is the whole log line's reason: the message's sequence number,
    what it showed, which releases send that, and what settled the format.
    """


def parse_release(text: str) -> Release | None:
    """The release an operator named (``v3.31``, ``3.31``, ``master``); None for auto."""
    text = text.strip().lower()
    if text in ("", "auto"):
        return None
    if text in _ALIASES:
        return _ALIASES[text]
    key = text if text.startswith("v") else f"v{text}"
    for release in Release:
        if release.value == key:
            return release
    names = ", ".join(r.value for r in Release)
    raise ValueError(f"unknown Felix release {text!r}: expected auto, {names} or master")


class Evidence:
    """What one message showed: the releases that send it that way, and why."""

    __slots__ = ("releases", "what")

    def __init__(self, what: str, releases: Iterable[Release]) -> None:
        self.what = what
        self.releases = frozenset(releases)


def _names(releases: frozenset[Release]) -> str:
    ordered = sorted(releases, key=lambda r: r.value)
    if not ordered:
        return "no supported release"
    if len(ordered) == 1:
        return ordered[0].value
    return f"{ordered[0].value}-{ordered[-1].value}"


class ReleaseDetector:
    """The releases still consistent with the stream, narrowed by evidence.

    Invariants: ``candidates`` only shrinks and is never empty (evidence that
    would empty it raises :class:`FormatError` and changes nothing); with a
    forced release it is that release from the start.
    """

    def __init__(self, forced: Release | None = None) -> None:
        self.forced = forced
        self.candidates: frozenset[Release] = frozenset({forced}) if forced else ALL
        self._why: list[str] = [f"--felix-release {forced.value} was given"] if forced else []
        self._said: str | None = None
        # Evidence from the stream itself has agreed with the candidates. A
        # forced release is not settled until then: a stream that disagrees
        # from its first evidence on is the operator's mistake, and fatal.
        self._evidenced = False
        self.routes_checked = False  # a RouteUpdate has shown it is not pre-v3.30
        if forced is not None:
            log.info("Felix wire format: %s (set by --felix-release)", forced.value)

    @property
    def legacy_policy(self) -> bool | None:
        """True: policy names are strings; False: PolicyIDs; None: not known yet."""
        if self.candidates <= LEGACY_POLICY:
            return True
        if not self.candidates & LEGACY_POLICY:
            return False
        return None

    @property
    def legacy_hosts(self) -> bool | None:
        if self.candidates <= LEGACY_HOSTS:
            return True
        if not self.candidates & LEGACY_HOSTS:
            return False
        return None

    @property
    def settled(self) -> bool:
        """The stream has shown both answers decoding needs."""
        return self._evidenced and self.legacy_policy is not None and self.legacy_hosts is not None

    def describe(self) -> str:
        return _names(self.candidates)

    def observe(self, evidence: Evidence, seq: int) -> None:
        narrowed = self.candidates & evidence.releases
        if not narrowed:
            was = "; ".join(self._why) or "nothing yet"
            if self.settled:
                raise ContradictionError(
                    f"seq={seq} {evidence.what}, which only {_names(evidence.releases)} send,"
                    f" but this Felix speaks {self.describe()} ({was})"
                )
            raise FormatError(
                f"unrecognised Felix wire format: seq={seq} {evidence.what}"
                f" (only {_names(evidence.releases)} send that) but earlier {was}"
                f" (only {self.describe()})"
            )
        self._evidenced = True
        if narrowed == self.candidates:
            return
        self.candidates = narrowed
        self._why.append(f"seq={seq} {evidence.what}")
        self._say()

    def refuse_old(self, what: str, seq: int) -> None:
        if self.settled:
            raise ContradictionError(
                f"seq={seq} {what}, which only v3.29 and older send,"
                f" but this Felix speaks {self.describe()} ({'; '.join(self._why)})"
            )
        raise FormatError(
            f"Felix v3.29 or older is not supported (seq={seq} {what});"
            " upgrade Felix to v3.30 or newer"
        )

    def _say(self) -> None:
        """Log once per format decision, naming the release range and why."""
        if self.legacy_policy is None or self.legacy_hosts is None:
            return
        decided = self.describe()
        if decided == self._said:
            return
        first = self._said is None
        self._said = decided
        log.info(
            "Felix wire format: %s%s (%s)",
            decided,
            "" if first else " (narrowed)",
            "; ".join(self._why),
        )
