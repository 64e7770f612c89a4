"""Say a master-form session the way a given Felix release says it.

Tests build one session in master's terms (the driver's own ``pb``) and
encode it with each release's schema, following that release's event
sequencer where the releases differ:

* up to v3.31: a policy is named by a string (``<ns>/knp.default.<name>``,
  ``<ns>/staged:<name>``, ...) in ``TierInfo`` and by ``PolicyID{tier,
  name}`` in ``ActivePolicy*``; ``Policy`` has no tier;
* v3.30: every ``WorkloadEndpoint`` carries its ``WorkloadType`` enum (14);
* up to v3.32: host metadata goes out as the host IP (14, bare), the IPv6
  address (35, bare) and the whole record (37, CIDR form); a node's removal
  as 38, 18 and 36.

Everything else is the same message in every release and is moved across
through its JSON form, which fails on any field the release does not have:
the content stays expressible in each release or the test says so. Our own
payloads (fields 1000 and up: service backends) and ``ServiceUpdate``, which
carries our fields 1000 and up beside Felix's (the same in every release
bar master's field 8, unused here), are framed with our schema in every
session.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import encode_frame
from tests.felix_releases import schema

__all__ = ["Speaker", "legacy_name", "speak"]

_LEGACY_POLICY = ("v3.30", "v3.31")
_LEGACY_HOSTS = ("v3.30", "v3.31", "v3.32")
_TIER_FIELDS = ("tiers", "untracked_tiers", "pre_dnat_tiers", "forward_tiers")
_OWN_PAYLOADS = {
    f.name for f in pb.ToDataplane.DESCRIPTOR.oneofs_by_name["payload"].fields if f.number >= 1000
} | {"service_update"}


def legacy_name(policy_id: dict[str, str]) -> str:
    """The v3.30-v3.31 string for a master PolicyID (libcalico-go's naming)."""
    name, namespace, kind = (policy_id.get(k, "") for k in ("name", "namespace", "kind"))
    staged = kind.startswith("Staged")
    base = kind.removeprefix("Staged")
    if base == "GlobalNetworkPolicy" and not namespace:
        return f"staged:{name}" if staged else name
    prefix = "staged:" if staged else ""
    if base == "KubernetesNetworkPolicy" and namespace:
        return f"{namespace}/{prefix}knp.default.{name}"
    if base == "NetworkPolicy" and namespace:
        return f"{namespace}/{prefix}{name}"
    raise ValueError(f"no v3.31 name for {policy_id}: set a kind as v3.32+ Felix always does")


class Speaker:
    """One Felix of ``release``: keeps what later messages depend on (tiers, hosts sent)."""

    def __init__(self, release: str) -> None:
        self.release = release
        self.schema = schema(release)
        self.tiers: dict[str, str] = {}  # legacy policy name -> tier (removes carry it)
        self.hosts_sent: dict[str, set[int]] = {}

    def frames(self, envelope: pb.ToDataplane) -> bytes:
        kind = envelope.WhichOneof("payload")
        if kind in _OWN_PAYLOADS:
            return encode_frame(envelope)
        out = json_format.MessageToDict(envelope, preserving_proto_field_name=True)
        seq = envelope.sequence_number
        bodies = [out]
        if self.release in _LEGACY_POLICY:
            self._policy(str(kind), out)
        if self.release == "v3.30" and kind == "workload_endpoint_update":
            # REGULAR is 0, never on the wire; VM on some exercises the enum.
            out[kind].setdefault("endpoint", {})["type"] = "REGULAR" if seq % 2 else "VM"
        if self.release in _LEGACY_HOSTS and kind in (
            "host_metadata_update",
            "host_metadata_remove",
        ):
            bodies = self._hosts(str(kind), out[str(kind)], seq)
        to_dataplane = self.schema.message("ToDataplane")
        return b"".join(
            encode_frame(json_format.ParseDict(body, to_dataplane())) for body in bodies
        )

    def _policy(self, kind: str, out: dict[str, Any]) -> None:
        payload = out.get(kind, {})
        if kind == "active_policy_update":
            name = legacy_name(payload["id"])
            tier = payload.get("policy", {}).pop("tier", "default")
            self.tiers[name] = tier
            payload["id"] = {"tier": tier, "name": name}
        elif kind == "active_policy_remove":
            name = legacy_name(payload["id"])
            payload["id"] = {"tier": self.tiers.pop(name, "default"), "name": name}
        elif kind in ("workload_endpoint_update", "host_endpoint_update"):
            endpoint = payload.get("endpoint", {})
            for field in _TIER_FIELDS:
                for tier in endpoint.get(field, []):
                    for direction in ("ingress_policies", "egress_policies"):
                        if direction in tier:
                            tier[direction] = [legacy_name(p) for p in tier[direction]]

    def _hosts(self, kind: str, payload: dict[str, Any], seq: int) -> list[dict[str, Any]]:
        name = payload["hostname"]
        sent = self.hosts_sent.setdefault(name, set())
        if kind == "host_metadata_remove":
            gone = [(38, "host_metadata_v4v6_remove"), (18, kind), (36, "host_metadata_v6_remove")]
            bodies = [
                {"sequence_number": str(seq), field: {"hostname": name}}
                for number, field in gone
                if number in sent
            ]
            self.hosts_sent.pop(name)
            return bodies
        bodies = []
        ipv4 = payload.get("ipv4_addr", "").partition("/")[0]
        ipv6 = payload.get("ipv6_addr", "").partition("/")[0]
        if ipv4:
            bodies.append({kind: {"hostname": name, "ipv4_addr": ipv4}})
            sent.add(18)
        if ipv6:
            bodies.append({"host_metadata_v6_update": {"hostname": name, "ipv6_addr": ipv6}})
            sent.add(36)
        bodies.append({"host_metadata_v4v6_update": payload})
        sent.add(38)
        for body in bodies:
            body["sequence_number"] = str(seq)
        return bodies

    def say(self, envelopes: list[pb.ToDataplane]) -> bytes:
        """The bytes this Felix sends for these master-form envelopes."""
        return b"".join(self.frames(envelope) for envelope in envelopes)


def speak(envelopes: list[pb.ToDataplane], release: str) -> bytes:
    """The byte stream ``release``'s Felix sends for this master-form session."""
    return Speaker(release).say(envelopes)
