"""One envelope's bytes (or object) into today's meaning, whichever Felix sent it.

:class:`EnvelopeDecoder` is the single place where release differences are
undone, so that the loop and managers see one schema, master's:

1. ``decode(body)``: while the policy format may be v3.30-v3.31's, the bytes
   of the four payloads that carry policy references are looked at
   (:func:`~dataplane.wire.legacy_policy.sniff`) and, if old, rewritten
   (:func:`~dataplane.wire.legacy_policy.transcode`) before parsing.
2. ``accept(envelope)``: decoded objects give the rest of the evidence (host
   metadata shapes, master-only fields, pre-v3.30 routes) and, up to v3.32,
   host metadata is merged into master's one message per node
   (:class:`~dataplane.wire.legacy_hosts.LegacyHosts`).

Once the format is known, a frame of another kind costs one ``WhichOneof``
and one set lookup here.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.legacy_hosts import LEGACY_HOST_PAYLOADS, LegacyHosts
from dataplane.wire.legacy_policy import POLICY_PAYLOADS, NewerFormError, sniff, transcode
from dataplane.wire.pbwire import LEN, iter_fields
from dataplane.wire.releases import (
    LEGACY_HOSTS,
    LEGACY_POLICY,
    Evidence,
    Release,
    ReleaseDetector,
)

__all__ = ["EnvelopeDecoder"]

_OLD_ROUTE_TYPE = 1  # RouteUpdate.type up to v3.29 (reserved since v3.30)
_MASTER = (Release.V3_33,)
_NEW_POLICY = (Release.V3_32, Release.V3_33)
_PAYLOAD_TYPES = {
    f.number: f.message_type.name
    for f in pb.ToDataplane.DESCRIPTOR.oneofs_by_name["payload"].fields
    if f.message_type is not None
}
_POLICY_KINDS = frozenset(
    f.name
    for f in pb.ToDataplane.DESCRIPTOR.oneofs_by_name["payload"].fields
    if f.number in POLICY_PAYLOADS
)
_OBJECT_EVIDENCE = LEGACY_HOST_PAYLOADS | {"encapsulation", "service_update", "route_update"}


_SEQUENCE_NUMBER = pb.ToDataplane.DESCRIPTOR.fields_by_name["sequence_number"].number


def _peek(body: bytes) -> tuple[int | None, int]:
    """The payload's field number and the sequence number, without parsing."""
    number: int | None = None
    seq = 0
    for f in iter_fields(body):
        if f.wire_type == LEN:
            number = f.number
        elif f.number == _SEQUENCE_NUMBER and isinstance(f.value, int):
            seq = f.value
    return number, seq


class EnvelopeDecoder:
    """Decodes one stream's envelopes; keeps that stream's format and host state."""

    def __init__(self, release: Release | None = None) -> None:
        self.detector = ReleaseDetector(release)
        self._hosts = LegacyHosts()
        self._policy_seen = False  # a frame's bytes have shown the policy format

    def decode(self, body: bytes | memoryview) -> pb.ToDataplane:
        """Parse one envelope, rewriting a v3.30-v3.31 one first.

        Raises:
            google.protobuf.message.DecodeError, WireError: not an envelope.
            FormatError: the bytes contradict the format seen so far.
        """
        detector = self.detector
        if self._policy_seen and detector.legacy_policy is False:
            return pb.ToDataplane.FromString(body)  # type: ignore[arg-type]  # upb takes buffers
        body = bytes(body)
        # Parsed first: a frame of any other kind parses alike in every
        # release, and most frames are of another kind (a node without a
        # tiered policy may never show the format: each of its frames was
        # walked in Python before the parse, a third of decoding 10,000
        # service messages).
        try:
            envelope = pb.ToDataplane.FromString(body)
        except DecodeError:
            envelope = None  # an old release's policy bytes, maybe: looked at below
        if envelope is not None and envelope.WhichOneof("payload") not in _POLICY_KINDS:
            return envelope
        number, seq = _peek(body)
        if number not in POLICY_PAYLOADS:
            return pb.ToDataplane.FromString(body)
        if not self._policy_seen:
            # Until the bytes themselves have shown the policy format (even
            # when --felix-release named it), look: one frame settles it.
            found = sniff(body)
            if found.legacy is not None:
                releases = LEGACY_POLICY if found.legacy else _NEW_POLICY
                detector.observe(Evidence(found.what, releases), seq)
                self._policy_seen = True
        if detector.legacy_policy:
            try:
                body, enum_14 = transcode(body)
            except NewerFormError as exc:
                kind = _PAYLOAD_TYPES[number]
                detector.observe(Evidence(f"{kind}: {exc}", _NEW_POLICY), seq)
                raise  # not reached: no v3.32+ is left among the candidates

            if enum_14 and len(detector.candidates) > 1:
                what = "WorkloadEndpoint field 14 is the WorkloadType enum"
                detector.observe(Evidence(what, (Release.V3_30,)), seq)
        return pb.ToDataplane.FromString(body)

    def accept(self, envelope: pb.ToDataplane) -> pb.ToDataplane | None:
        """Evidence from a decoded envelope; old host metadata made master's.

        Returns the envelope to hand on: ``envelope`` itself, a new one in
        master's form, or None when it means nothing in master's terms (a
        remove for a node never announced).

        Raises:
            FormatError: the envelope contradicts the format seen so far, or
                comes from Felix v3.29 or older.
        """
        kind = envelope.WhichOneof("payload")
        if kind not in _OBJECT_EVIDENCE:
            return envelope
        seq = envelope.sequence_number
        msg = getattr(envelope, kind)
        detector = self.detector
        if kind == "route_update":
            if not detector.routes_checked:
                self._check_route(msg, seq)
            return envelope
        if kind == "encapsulation":
            if msg.no_encap_enabled:
                what = "Encapsulation.no_encap_enabled (field 4) is set"
                detector.observe(Evidence(what, _MASTER), seq)
            return envelope
        if kind == "service_update":
            if msg.loadbalancer_ingress_ips:
                what = "ServiceUpdate.loadbalancer_ingress_ips (field 8) is set"
                detector.observe(Evidence(what, _MASTER), seq)
            return envelope
        self._host_evidence(kind, msg, seq)
        if detector.legacy_hosts:
            return self._hosts.translate(kind, msg, seq)
        return envelope

    def _check_route(self, msg: pb.RouteUpdate, seq: int) -> None:
        unknown = UnknownFieldSet(msg)
        if any(unknown[i].field_number == _OLD_ROUTE_TYPE for i in range(len(unknown))):
            self.detector.refuse_old("RouteUpdate carries type (field 1), not types (12)", seq)
        if msg.types:
            self.detector.routes_checked = True

    def _host_evidence(self, kind: str, msg: pb.HostMetadataUpdate, seq: int) -> None:
        detector = self.detector
        if kind != "host_metadata_update":
            if kind != "host_metadata_remove":
                name = type(msg).__name__
                number = pb.ToDataplane.DESCRIPTOR.fields_by_name[kind].number
                detector.observe(Evidence(f"{name} (field {number}) arrived", LEGACY_HOSTS), seq)
            return
        if msg.ipv6_addr or msg.asnumber or msg.labels or "/" in msg.ipv4_addr:
            what = "HostMetadataUpdate carries CIDR addresses, AS number or labels"
            detector.observe(Evidence(what, _MASTER), seq)
        elif msg.ipv4_addr:
            what = "HostMetadataUpdate carries a bare IPv4 address"
            detector.observe(Evidence(what, LEGACY_HOSTS), seq)
