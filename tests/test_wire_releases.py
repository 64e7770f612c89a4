"""Every supported Felix release's wire, decoded into master's meaning.

Sessions are encoded with each release's own schema (tests/felix_releases)
the way that release's Felix says them, replayed through the driver, and
must program exactly what the master session programs. The wire pieces are
then checked one by one: the name mapping, the detector's decisions and its
one-line refusals, the host-metadata merge against a plain reference.
"""

from __future__ import annotations

import io
import logging

import pytest
import trio
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from dataplane.core.loop import Dataplane
from dataplane.errors import ProtocolError
from dataplane.managers import HostsManager
from dataplane.model.hosts import Host
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.framing import FrameDecoder, encode_frame
from dataplane.wire.legacy_hosts import LegacyHosts
from dataplane.wire.legacy_policy import legacy_policy_id
from dataplane.wire.releases import Release, parse_release
from dataplane.wire.transport import FileSource, QueueSource
from tests.felix_releases import RELEASES, schema
from tests.felix_releases.session import after_sync, master_session
from tests.felix_releases.speak import legacy_name, speak
from tests.kernel import scenario

IFACES = {p.name: p.iface for p in scenario.PODS}


def _session(overlay: bool = True) -> list[pb.ToDataplane]:
    first = master_session(IFACES, overlay=overlay)
    return first + after_sync(len(first) + 1)  # one Felix says it all: one speaker


def _replay(data: bytes, release: str = "auto") -> tuple[str, FileSource]:
    platform = SimPlatform()
    dp = Dataplane(platform)
    source = FileSource(io.BytesIO(data), release=release)
    trio.run(dp.run, source)
    assert dp.stats.rejected == 0
    return platform.dump(), source


def _decoded(data: bytes, release: Release | None = None) -> list[pb.ToDataplane]:
    decoder = FrameDecoder(release=release)
    out = decoder.feed(data)
    decoder.close()
    return out


# --- whole sessions --------------------------------------------------------------


@pytest.mark.parametrize("release", RELEASES)
def test_each_release_programs_what_the_master_session_programs(release: str) -> None:
    session = _session()
    master, _ = _replay(b"".join(encode_frame(e) for e in session))
    spoken, source = _replay(speak(session, release))
    assert spoken == master
    detected = source.decoder.envelopes.detector
    assert Release(release) in detected.candidates
    assert detected.legacy_policy == (release in ("v3.30", "v3.31"))
    assert detected.legacy_hosts == (release != "v3.33")


@pytest.mark.parametrize("release", RELEASES)
def test_decoded_envelopes_equal_masters_message_for_message(release: str) -> None:
    """Below the dump: every policy and endpoint message comes out as master's."""
    session = _session(overlay=False)
    kinds = {"active_policy_update", "active_policy_remove", "workload_endpoint_update"}
    kinds |= {"host_endpoint_update"}
    wanted = [e for e in session if e.WhichOneof("payload") in kinds]
    got = [e for e in _decoded(speak(session, release)) if e.WhichOneof("payload") in kinds]
    assert got == wanted


def test_the_session_uses_what_makes_releases_differ() -> None:
    """A guard on the test itself: the content exercises every difference."""
    session = _session()
    kinds = [e.WhichOneof("payload") for e in session]
    names = {e.active_policy_update.id.kind for e in session if e.HasField("active_policy_update")}
    assert {"GlobalNetworkPolicy", "NetworkPolicy", "KubernetesNetworkPolicy"} <= names
    assert {"StagedNetworkPolicy", "StagedGlobalNetworkPolicy"} <= names
    assert {"host_metadata_update", "host_metadata_remove", "active_policy_remove"} <= set(kinds)
    assert {"host_endpoint_update", "route_update", "vtep_update", "service_update"} <= set(kinds)
    v331 = speak(session, "v3.31")
    assert b"backend/knp.default.allow-prom-probe" in v331
    assert b"backend/staged:lockdown" in v331


def test_a_v3_31_name_starting_with_d_decodes() -> None:
    """0x64 ('d') is END_GROUP for field 12: master's parser fails on the whole frame."""
    s = schema("v3.31")
    tier = s.new("TierInfo", name="default", ingress_policies=["default/deny-all"])
    wep = s.new(
        "WorkloadEndpointUpdate",
        id=s.new("WorkloadEndpointID", orchestrator_id="k8s", workload_id="default/a"),
        endpoint=s.new("WorkloadEndpoint", name="cali1", tiers=[tier]),
    )
    frame = encode_frame(s.new("ToDataplane", sequence_number=3, workload_endpoint_update=wep))
    with pytest.raises(DecodeError):
        pb.ToDataplane.FromString(frame[8:])
    (envelope,) = _decoded(frame)
    (policy,) = envelope.workload_endpoint_update.endpoint.tiers[0].ingress_policies
    assert policy == pb.PolicyID(name="deny-all", namespace="default", kind="NetworkPolicy")


# --- the name mapping ------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("ns/knp.default.x", ("x", "ns", "KubernetesNetworkPolicy")),
        ("ns/staged:knp.default.x", ("x", "ns", "StagedKubernetesNetworkPolicy")),
        ("ns/x", ("x", "ns", "NetworkPolicy")),
        ("ns/security.x", ("security.x", "ns", "NetworkPolicy")),
        ("ns/staged:x", ("x", "ns", "StagedNetworkPolicy")),
        ("staged:x", ("x", "", "StagedGlobalNetworkPolicy")),
        ("x", ("x", "", "GlobalNetworkPolicy")),
        ("kanp.adminnetworkpolicy.x", ("kanp.adminnetworkpolicy.x", "", "GlobalNetworkPolicy")),
        ("knp.default.x", ("knp.default.x", "", "GlobalNetworkPolicy")),
    ],
)
def test_v3_31_names_map_to_v3_32_ids(old: str, new: tuple[str, str, str]) -> None:
    assert legacy_policy_id(old) == new


_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,20}[a-z0-9])?", fullmatch=True)
_KINDS = st.sampled_from(
    [
        "GlobalNetworkPolicy",
        "StagedGlobalNetworkPolicy",
        "NetworkPolicy",
        "StagedNetworkPolicy",
        "KubernetesNetworkPolicy",
        "StagedKubernetesNetworkPolicy",
    ]
)


@given(_LABEL, _LABEL, _KINDS)
def test_names_round_trip(name: str, namespace: str, kind: str) -> None:
    namespace = "" if kind.endswith("GlobalNetworkPolicy") else namespace
    if kind.endswith("NetworkPolicy") and "Kubernetes" not in kind and namespace:
        # A Calico policy literally named knp.default.* is a Kubernetes one to v3.31.
        name = name.removeprefix("knp.default.") or "x"
    spoken = legacy_name({"name": name, "namespace": namespace, "kind": kind})
    assert legacy_policy_id(spoken) == (name, namespace, kind)


# --- detection -------------------------------------------------------------------


def _frames(release: str, *payloads: tuple[str, dict[str, object]]) -> bytes:
    s = schema(release)
    out = b""
    for seq, (kind, fields) in enumerate(payloads, start=1):
        message = s.new(_TYPE[kind], **fields)
        out += encode_frame(s.new("ToDataplane", sequence_number=seq, **{kind: message}))
    return out


_TYPE = {
    "active_policy_update": "ActivePolicyUpdate",
    "host_metadata_update": "HostMetadataUpdate",
    "host_metadata_v4v6_update": "HostMetadataV4V6Update",
    "route_update": "RouteUpdate",
}


def _old_policy(release: str) -> tuple[str, dict[str, object]]:
    s = schema(release)
    return "active_policy_update", {
        "id": s.new("PolicyID", tier="default", name="ns/p"),
        "policy": s.new("Policy"),
    }


def _new_policy(release: str) -> tuple[str, dict[str, object]]:
    s = schema(release)
    return "active_policy_update", {
        "id": s.new("PolicyID", name="p", namespace="ns", kind="NetworkPolicy"),
        "policy": s.new("Policy", tier="default"),
    }


def test_detection_logs_once_which_format_and_why(caplog: pytest.LogCaptureFixture) -> None:
    data = _frames(
        "v3.31",
        _old_policy("v3.31"),
        ("host_metadata_update", {"hostname": "n", "ipv4_addr": "192.0.2.1"}),
        _old_policy("v3.31"),
    )
    with caplog.at_level(logging.INFO, logger="dataplane.wire"):
        decoded = _decoded(data)
    assert decoded[0].active_policy_update.policy.tier == "default"
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "Felix wire format: v3.30-v3.31 (seq=1 ActivePolicyUpdate: PolicyID.tier (field 1) is set)"
    ]


def test_a_v3_32_stream_is_told_from_master_by_its_host_messages() -> None:
    data = _frames(
        "v3.32",
        _new_policy("v3.32"),
        ("host_metadata_update", {"hostname": "n", "ipv4_addr": "192.0.2.1"}),
        ("host_metadata_v4v6_update", {"hostname": "n", "ipv4_addr": "192.0.2.1/24"}),
    )
    decoder = FrameDecoder()
    out = decoder.feed(data)
    assert decoder.envelopes.detector.candidates == {Release.V3_32}
    assert out[-1].host_metadata_update == pb.HostMetadataUpdate(
        hostname="n", ipv4_addr="192.0.2.1/24"
    )


def test_evidence_that_contradicts_itself_before_the_format_settles_is_one_line() -> None:
    """A bare IPv4 host address leaves the policy format open; master's field then is fatal."""
    first = _frames("v3.31", ("host_metadata_update", {"hostname": "n", "ipv4_addr": "192.0.2.1"}))
    second = encode_frame(
        pb.ToDataplane(sequence_number=2, encapsulation=pb.Encapsulation(no_encap_enabled=True))
    )
    with pytest.raises(ProtocolError) as info:
        _decoded(first + second)
    assert "\n" not in str(info.value)
    assert str(info.value) == (
        f"malformed input at byte offset {len(first)} (frame 1, last good seq 1): unrecognised"
        " Felix wire format: seq=2 Encapsulation.no_encap_enabled (field 4) is set (only v3.33"
        " send that) but earlier seq=1 HostMetadataUpdate carries a bare IPv4 address (only"
        " v3.30-v3.32)"
    )


def _v3_33_endpoint(seq: int) -> bytes:
    s = schema("v3.33")
    tier = s.new("TierInfo", name="default", ingress_policies=[s.new("PolicyID", name="p")])
    wep = s.new(
        "WorkloadEndpointUpdate",
        id=s.new("WorkloadEndpointID", workload_id="default/a"),
        endpoint=s.new("WorkloadEndpoint", name="cali1", tiers=[tier]),
    )
    return encode_frame(s.new("ToDataplane", sequence_number=seq, workload_endpoint_update=wep))


def test_a_settled_v3_31_stream_refuses_one_v3_32_message_and_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = _frames("v3.31", _old_policy("v3.31"))
    second = _v3_33_endpoint(2)
    third = _frames("v3.31", _old_policy("v3.31")).replace(b"\x78\x01", b"\x78\x03")
    decoder = FrameDecoder()
    with caplog.at_level(logging.WARNING, logger="dataplane.wire"):
        out = decoder.feed(first + second + third)
    decoder.close()
    assert [e.sequence_number for e in out] == [1, 3]
    assert decoder.refused == 1
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == (
        "frame 1: seq=2 WorkloadEndpointUpdate: TierInfo policies are PolicyID messages,"
        " which only v3.32-v3.33 send, but this Felix speaks v3.30-v3.31 (seq=1"
        " ActivePolicyUpdate: PolicyID.tier (field 1) is set); message refused"
    )


def _settled_master() -> bytes:
    return _frames(
        "v3.33",
        _new_policy("v3.33"),
        ("host_metadata_update", {"hostname": "n", "ipv4_addr": "192.0.2.1/24"}),
    )


def test_a_tag_master_does_not_define_after_master_settled_is_one_refused_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Felix v3.33 never sends 37 (HostMetadataV4V6Update): refuse it, keep going."""
    v4v6 = _frames(
        "v3.32", ("host_metadata_v4v6_update", {"hostname": "m", "ipv4_addr": "192.0.2.9/24"})
    ).replace(b"\x78\x01", b"\x78\x03")
    later = _frames(
        "v3.33", ("host_metadata_update", {"hostname": "m", "ipv4_addr": "192.0.2.7/24"})
    ).replace(b"\x78\x01", b"\x78\x04")
    decoder = FrameDecoder()
    with caplog.at_level(logging.WARNING, logger="dataplane.wire"):
        out = decoder.feed(_settled_master() + v4v6 + later)
    decoder.close()
    assert [e.sequence_number for e in out] == [1, 2, 4]
    assert out[-1].host_metadata_update.ipv4_addr == "192.0.2.7/24"
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith(
        "frame 2: seq=3 HostMetadataV4V6Update (field 37) arrived, which only v3.30-v3.32"
        " send, but this Felix speaks v3.33 ("
    )
    assert line.endswith("; message refused")


def test_an_embedder_s_contradicting_message_is_refused_alone() -> None:
    source = QueueSource()
    for envelope in _decoded(_settled_master()):
        source.put(envelope)
    source.put(
        pb.ToDataplane(
            sequence_number=3,
            host_metadata_v4v6_update=pb.HostMetadataV4V6Update(
                hostname="m", ipv4_addr="1.2.3.4/8"
            ),
        )
    )
    kinds = [e.WhichOneof("payload") for e in source.poll()]
    assert kinds == ["active_policy_update", "host_metadata_update"]


def test_a_settled_stream_refuses_a_v3_29_route_alone() -> None:
    old_route = b"\x08\x01" + b"\x1a\x0b10.0.1.0/26"
    envelope = b"\x78\x05" + b"\xba\x01" + bytes([len(old_route)]) + old_route
    frame = len(envelope).to_bytes(8, "little") + envelope
    decoder = FrameDecoder()
    out = decoder.feed(_frames("v3.31", _old_policy("v3.31")) + frame)
    decoder.close()
    assert [e.sequence_number for e in out] == [1]
    assert decoder.refused == 1


def test_a_forced_release_refuses_another_releases_stream() -> None:
    with pytest.raises(ProtocolError, match=r"--felix-release v3\.33 was given"):
        _decoded(_frames("v3.31", _old_policy("v3.31")), Release.V3_33)


def test_a_forced_release_decodes_an_ambiguous_stream_its_way() -> None:
    """A host message with only a name says nothing; v3.32 keeps it per stream."""
    data = _frames(
        "v3.32",
        ("host_metadata_v4v6_update", {"hostname": "n", "ipv4_addr": "192.0.2.1/24"}),
    )
    (out,) = _decoded(data, Release.V3_32)
    assert out.host_metadata_update.ipv4_addr == "192.0.2.1/24"


def test_felix_v3_29_is_refused_naming_the_release() -> None:
    old_route = b"\x08\x01" + b"\x1a\x0b10.0.1.0/26"  # type = 1 (REMOTE_WORKLOAD), dst
    envelope = b"\x78\x05" + b"\xba\x01" + bytes([len(old_route)]) + old_route  # seq, route_update
    frame = len(envelope).to_bytes(8, "little") + envelope
    with pytest.raises(ProtocolError) as info:
        _decoded(frame)
    assert info.value.reason == (
        "Felix v3.29 or older is not supported (seq=5 RouteUpdate carries type (field 1), not"
        " types (12)); upgrade Felix to v3.30 or newer"
    )


@pytest.mark.parametrize(
    ("text", "release"),
    [("auto", None), ("", None), ("v3.31", Release.V3_31), ("3.32", Release.V3_32)],
)
def test_release_names(text: str, release: Release | None) -> None:
    assert parse_release(text) is release


def test_master_is_v3_33_and_an_unknown_release_is_named() -> None:
    assert parse_release("master") is Release.V3_33
    with pytest.raises(ValueError, match=r"unknown Felix release 'v3\.29'"):
        parse_release("v3.29")


# --- host metadata ---------------------------------------------------------------

_NAMES = st.sampled_from(["a", "b"])
_V4 = st.sampled_from(["", "10.0.0.1", "10.0.0.2"])
_V6 = st.sampled_from(["", "fd00::1", "fd00::2"])
_OLD_HOSTS = st.lists(
    st.one_of(
        st.builds(pb.HostMetadataUpdate, hostname=_NAMES, ipv4_addr=_V4),
        st.builds(pb.HostMetadataRemove, hostname=_NAMES),
        st.builds(pb.HostMetadataV6Update, hostname=_NAMES, ipv6_addr=_V6),
        st.builds(pb.HostMetadataV6Remove, hostname=_NAMES),
        st.builds(
            pb.HostMetadataV4V6Update,
            hostname=_NAMES,
            ipv4_addr=st.sampled_from(["", "10.0.0.1/24", "10.0.0.3/16"]),
            ipv6_addr=st.sampled_from(["", "fd00::1/64"]),
            asnumber=st.sampled_from(["", "64512"]),
        ),
        st.builds(pb.HostMetadataV4V6Remove, hostname=_NAMES),
    ),
    max_size=25,
)


def _reference(ops: list[object]) -> dict[str, Host]:
    """v3.32's three streams, each kept apart, then read as one node (plainly)."""
    bare4: dict[str, str] = {}
    bare6: dict[str, str] = {}
    full: dict[str, pb.HostMetadataV4V6Update] = {}
    for msg in ops:
        name = msg.hostname  # type: ignore[attr-defined]
        if isinstance(msg, pb.HostMetadataUpdate):
            bare4[name] = msg.ipv4_addr
        elif isinstance(msg, pb.HostMetadataRemove):
            bare4[name] = ""
        elif isinstance(msg, pb.HostMetadataV6Update):
            bare6[name] = msg.ipv6_addr
        elif isinstance(msg, pb.HostMetadataV6Remove):
            bare6[name] = ""
        elif isinstance(msg, pb.HostMetadataV4V6Update):
            full[name] = msg
        else:
            full.pop(name, None)
    hosts = {}
    for name in set(bare4) | set(bare6) | set(full):
        f = full.get(name)
        v4, p4 = _pick(bare4.get(name, ""), f.ipv4_addr if f else "")
        v6, p6 = _pick(bare6.get(name, ""), f.ipv6_addr if f else "")
        if v4 or v6 or f:
            hosts[name] = Host(name, v4, v6, p4, p6, f.asnumber if f else "")
    return hosts


def _pick(bare: str, cidr: str) -> tuple[str, int]:
    address, _, length = cidr.partition("/")
    if cidr and (not bare or bare == address):
        return address, int(length)
    return bare, 0


class _Sink:
    def __init__(self) -> None:
        self.hosts: dict[str, Host] = {}

    def set_host(self, host: Host) -> None:
        self.hosts[host.name] = host

    def remove_host(self, name: str) -> None:
        del self.hosts[name]

    def set_encapsulation(self, encapsulation: object) -> None:
        pass


@given(_OLD_HOSTS)
def test_old_host_streams_merge_into_what_master_would_say(ops: list[object]) -> None:
    merger = LegacyHosts()
    sink = _Sink()
    manager = HostsManager(sink)
    for seq, msg in enumerate(ops, start=1):
        envelope = pb.ToDataplane(sequence_number=seq)
        kind = next(
            f.name
            for f in pb.ToDataplane.DESCRIPTOR.oneofs_by_name["payload"].fields
            if f.message_type is msg.DESCRIPTOR  # type: ignore[attr-defined]
        )
        out = merger.translate(kind, msg, envelope.sequence_number)
        if out is not None:
            manager.on_update(getattr(out, str(out.WhichOneof("payload"))))
        manager.complete_deferred_work()
    assert sink.hosts == _reference(ops)
