"""Per-release Felix schemas (tests/felix_releases) load side by side and differ where Felix did.

The last test holds our own proto/felixbackend.proto against them: below field
number 1000 it is Felix master (v3.33) plus v3.32's host-metadata payloads.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.felix_releases import RELEASES, ReleaseSchema, schema

# ToDataplane payloads that v3.32 carries and master (hence v3.33) reserves.
V3_32_HOST_PAYLOADS: dict[int, tuple[str, str]] = {
    35: ("host_metadata_v6_update", "HostMetadataV6Update"),
    36: ("host_metadata_v6_remove", "HostMetadataV6Remove"),
    37: ("host_metadata_v4v6_update", "HostMetadataV4V6Update"),
    38: ("host_metadata_v4v6_remove", "HostMetadataV4V6Remove"),
}
HOST_PAYLOAD_TYPES = frozenset(t for _, t in V3_32_HOST_PAYLOADS.values())
OUR_FIRST_OWN_NUMBER = 1000

# Fields of Felix's messages that proto/felixbackend.proto numbers below 1000 yet no
# transcribed Felix release (v3.30 to master) defines. Each is a collision risk with a
# future Felix field; this set may only shrink.
NOT_FROM_FELIX: set[tuple[str, int]] = set()


def _field(s: ReleaseSchema, message: str, number: int) -> FieldDescriptor:
    return s.descriptor(message).fields_by_number[number]


def _type_of(f: FieldDescriptor) -> tuple[int, bool, str | None]:
    """What a field is on the wire and in code: scalar type, repeated, named type."""
    named = f.message_type or f.enum_type
    return (f.type, f.is_repeated, named.full_name if named else None)


def _messages(descriptors: Iterator[Descriptor]) -> Iterator[Descriptor]:
    for d in descriptors:
        yield d
        yield from _messages(iter(d.nested_types))


@pytest.mark.parametrize("release", RELEASES)
def test_each_release_compiles_into_its_own_pool(release: str) -> None:
    s = schema(release)
    assert s.release == release
    assert s.package == "felix"
    assert s is schema(release), "schema() is cached"
    to_dp = s.descriptor("ToDataplane")
    assert to_dp.oneofs_by_name["payload"].fields
    assert s.pool.FindMessageTypeByName("felix.ToDataplane") is to_dp
    # Nothing leaked into the process-wide pool our generated module lives in.
    assert pb.ToDataplane.DESCRIPTOR is not to_dp


def test_tier_info_policies_became_policy_ids_in_v3_32() -> None:
    f31 = schema("v3.31").descriptor("TierInfo").fields_by_name["ingress_policies"]
    assert f31.is_repeated
    assert f31.type == FieldDescriptor.TYPE_STRING
    for release in ("v3.32", "v3.33"):
        f = schema(release).descriptor("TierInfo").fields_by_name["ingress_policies"]
        assert f.is_repeated
        assert f.type == FieldDescriptor.TYPE_MESSAGE
        assert f.message_type is not None
        assert f.message_type.full_name == "felix.PolicyID"


def test_policy_id_lost_its_tier_in_v3_32() -> None:
    tier = _field(schema("v3.31"), "PolicyID", 1)
    assert (tier.name, tier.type) == ("tier", FieldDescriptor.TYPE_STRING)
    for release in ("v3.32", "v3.33"):
        s = schema(release)
        assert 1 not in s.descriptor("PolicyID").fields_by_number
        proto = s.descriptor_proto("PolicyID")
        assert [(r.start, r.end) for r in proto.reserved_range] == [(1, 2)]
        assert list(proto.reserved_name) == ["tier"]


def test_workload_endpoint_field_14_is_an_enum_in_v3_30_and_a_message_in_v3_31() -> None:
    f30 = _field(schema("v3.30"), "WorkloadEndpoint", 14)
    assert f30.type == FieldDescriptor.TYPE_ENUM
    assert f30.enum_type is not None
    assert f30.enum_type.full_name == "felix.WorkloadType"
    f31 = _field(schema("v3.31"), "WorkloadEndpoint", 14)
    assert f31.type == FieldDescriptor.TYPE_MESSAGE
    assert f31.message_type is not None
    assert f31.message_type.full_name == "felix.WorkloadBpfSkipRedir"


def test_v3_32_host_payloads_are_reserved_in_v3_33() -> None:
    v32, v33 = schema("v3.32"), schema("v3.33")
    for number, (name, type_name) in V3_32_HOST_PAYLOADS.items():
        f = _field(v32, "ToDataplane", number)
        assert f.name == name
        assert f.containing_oneof is not None
        assert f.containing_oneof.name == "payload"
        assert f.message_type is not None
        assert f.message_type.full_name == f"felix.{type_name}"
        assert number not in v33.descriptor("ToDataplane").fields_by_number
    proto = v33.descriptor_proto("ToDataplane")
    reserved = {n for r in proto.reserved_range for n in range(r.start, r.end)}
    assert reserved == set(V3_32_HOST_PAYLOADS)
    assert set(proto.reserved_name) == HOST_PAYLOAD_TYPES


def test_messages_from_two_releases_coexist_in_one_process() -> None:
    v31, v32 = schema("v3.31"), schema("v3.32")
    old = v31.new("TierInfo", name="default", ingress_policies=["default.allow-dns"])
    new = v32.new(
        "TierInfo",
        name="default",
        ingress_policies=[v32.new("PolicyID", name="allow-dns", kind="GlobalNetworkPolicy")],
    )
    assert v31.message("TierInfo") is not v32.message("TierInfo")
    assert type(old) is v31.message("TierInfo")
    assert type(new) is v32.message("TierInfo")
    # Same field number, different wire type: each decodes its own bytes only.
    assert v31.message("TierInfo").FromString(old.SerializeToString()) == old
    assert v32.message("TierInfo").FromString(new.SerializeToString()) == new
    # And the driver's own generated module is unaffected by either.
    ours = pb.TierInfo.FromString(new.SerializeToString())
    assert [p.name for p in ours.ingress_policies] == ["allow-dns"]


def _felix_field(name: str, number: int) -> FieldDescriptor | None:
    """The Felix field our ``name``/``number`` must equal: v3.33's, else v3.32's host payloads."""
    v32, v33 = schema("v3.32"), schema("v3.33")
    if name in _message_names("v3.33") and number in v33.descriptor(name).fields_by_number:
        return _field(v33, name, number)
    if (name == "ToDataplane" and number in V3_32_HOST_PAYLOADS) or (
        name not in _message_names("v3.33") and name.split(".", maxsplit=1)[0] in HOST_PAYLOAD_TYPES
    ):
        return _field(v32, name, number)
    return None


@functools.cache
def _message_names(release: str) -> frozenset[str]:
    s = schema(release)
    return frozenset(
        d.full_name.removeprefix(f"{s.package}.")
        for d in _messages(iter(s.file.message_types_by_name.values()))
    )


def test_our_schema_is_master_plus_v3_32_host_payloads_plus_our_own() -> None:
    felix_names = set().union(*(_message_names(r) for r in RELEASES))
    ours_only = {
        d.full_name
        for d in _messages(iter(pb.DESCRIPTOR.message_types_by_name.values()))
        if d.full_name.removeprefix("felix.") not in felix_names
    }
    deviations: set[tuple[str, int]] = set()
    checked = 0
    for ours in _messages(iter(pb.DESCRIPTOR.message_types_by_name.values())):
        name = ours.full_name.removeprefix("felix.")
        for f in ours.fields:
            where = f"{ours.full_name}.{f.name} = {f.number}"
            if f.message_type is not None and f.message_type.full_name in ours_only:
                # Our own messages hang only off our own (1000+) fields.
                assert f.number >= OUR_FIRST_OWN_NUMBER or ours.full_name in ours_only, where
            if f.number >= OUR_FIRST_OWN_NUMBER or ours.full_name in ours_only:
                continue
            felix = _felix_field(name, f.number)
            if felix is None:
                deviations.add((name, f.number))
                continue
            assert f.name == felix.name, where
            assert _type_of(f) == _type_of(felix), where
            assert (f.containing_oneof is None) == (felix.containing_oneof is None), where
            checked += 1
    assert checked > 300
    assert deviations == NOT_FROM_FELIX, "fields below 1000 that no Felix release defines"


def test_our_schema_has_every_felix_master_field() -> None:
    v33 = schema("v3.33")
    for name in _message_names("v3.33"):
        ours = pb.DESCRIPTOR.pool.FindMessageTypeByName(f"felix.{name}")
        for felix in v33.descriptor(name).fields:
            f = ours.fields_by_number.get(felix.number)
            assert f is not None, f"ours lacks felix.{name}.{felix.name} = {felix.number}"
            assert (f.name, _type_of(f)) == (felix.name, _type_of(felix)), f"felix.{name}.{f.name}"
