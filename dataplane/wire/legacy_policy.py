"""Felix v3.30-v3.31 policy references, rewritten into today's form.

Up to v3.31 Felix names a policy by a string in ``TierInfo`` (fields 2 and
3, ``repeated string``) and by ``PolicyID{tier = 1, name = 2}`` in
``ActivePolicyUpdate``/``Remove``. From v3.32 both are ``PolicyID{name = 2,
namespace = 3, kind = 4}`` and the tier moved to ``Policy.tier`` (8). Same
field numbers, same wire type: today's parser reads an old name as a
``PolicyID`` and fails outright on one starting with ``d`` (0x64, an
END_GROUP tag), so old frames are rewritten *before* parsing, at the wire
level, and every layer above sees only today's messages.

The old name string maps to today's identity exactly as libcalico-go's
update processors built both (``names.K8sNetworkPolicyNamePrefix``,
``model.PolicyNamePrefixStaged``):

=============================  ==========================================
v3.31 name                     v3.32 PolicyID (name, namespace, kind)
=============================  ==========================================
``ns/knp.default.x``           (x, ns, KubernetesNetworkPolicy)
``ns/staged:knp.default.x``    (x, ns, StagedKubernetesNetworkPolicy)
``ns/x``                       (x, ns, NetworkPolicy)
``ns/staged:x``                (x, ns, StagedNetworkPolicy)
``staged:x``                   (x, "", StagedGlobalNetworkPolicy)
``x``                          (x, "", GlobalNetworkPolicy)
=============================  ==========================================

v3.30.1-v3.30.7 also put an enum at ``WorkloadEndpoint`` 14 (a message
from v3.31; BPF-only, nothing here reads it): it is dropped.

Only the four payloads that carry policy references are walked; every other
byte is copied unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from dataplane.wire.pbwire import LEN, VARINT, WireError, encode_len, iter_fields

__all__ = ["NewerFormError", "Sniff", "legacy_policy_id", "sniff", "transcode"]

K8S_PREFIX = "knp.default."
STAGED_PREFIX = "staged:"

# ToDataplane payload field numbers that carry policy references.
_ACTIVE_POLICY_UPDATE = 7
_ACTIVE_POLICY_REMOVE = 8
_HOST_ENDPOINT_UPDATE = 9
_WORKLOAD_ENDPOINT_UPDATE = 11
POLICY_PAYLOADS = frozenset(
    {_ACTIVE_POLICY_UPDATE, _ACTIVE_POLICY_REMOVE, _HOST_ENDPOINT_UPDATE, _WORKLOAD_ENDPOINT_UPDATE}
)

_WEP_UPDATE_ENDPOINT = 5
_HEP_UPDATE_ENDPOINT = 3
_WEP_TIERS = frozenset({7})
_HEP_TIERS = frozenset({3, 6, 7, 8})  # tiers, untracked, pre-DNAT, forward
_WEP_LEGACY_TYPE = 14  # v3.30.x: enum WorkloadType (varint)
_TIER_POLICY_FIELDS = frozenset({2, 3})  # ingress_policies, egress_policies
_OLD_ID_TIER = 1
_ID_NAME, _ID_NAMESPACE, _ID_KIND = 2, 3, 4
_POLICY_TIER = 8
# A today's PolicyID starts with one of these tags (fields 2, 3 or 4, LEN);
# no Kubernetes or Calico name starts with such a control byte.
_POLICY_ID_TAGS = frozenset({0x12, 0x1A, 0x22})


class NewerFormError(WireError):
    """A v3.32+ policy reference in what has been a v3.30-v3.31 stream."""


def legacy_policy_id(name: str) -> tuple[str, str, str]:
    """Today's (name, namespace, kind) for a v3.30-v3.31 policy name."""
    namespace = ""
    if name.count("/") == 1:  # as Felix's stagedToEnforcedV1Name splits it
        namespace, name = name.split("/")
    staged = name.startswith(STAGED_PREFIX)
    if staged:
        name = name[len(STAGED_PREFIX) :]
    if not namespace:
        kind = "GlobalNetworkPolicy"
    elif name.startswith(K8S_PREFIX):
        name = name[len(K8S_PREFIX) :]
        kind = "KubernetesNetworkPolicy"
    else:
        kind = "NetworkPolicy"
    return name, namespace, f"Staged{kind}" if staged else kind


def _policy_id(name: str, namespace: str, kind: str) -> bytes:
    out = encode_len(_ID_NAME, name.encode())
    if namespace:
        out += encode_len(_ID_NAMESPACE, namespace.encode())
    return out + encode_len(_ID_KIND, kind.encode())


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise WireError("expected a string, found a varint")
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise WireError("a policy name is not UTF-8") from None


def _rewrite(
    buf: bytes, fields: dict[int, Callable[[bytes], bytes]], drop: list[int] | None = None
) -> bytes:
    """``buf`` with each LEN field in ``fields`` replaced by its rewrite.

    A varint at ``_WEP_LEGACY_TYPE`` is dropped when ``drop`` is given, and
    counted in it.
    """
    out = bytearray()
    for f in iter_fields(buf):
        rewrite = fields.get(f.number)
        if rewrite is not None and f.wire_type == LEN:
            assert isinstance(f.value, bytes)
            out += encode_len(f.number, rewrite(f.value))
        elif drop is not None and f.number == _WEP_LEGACY_TYPE and f.wire_type == VARINT:
            drop.append(1)
        else:
            out += f.raw
    return bytes(out)


def _tier_entry(value: bytes) -> bytes:
    if value and value[0] in _POLICY_ID_TAGS:
        raise NewerFormError("TierInfo policies are PolicyID messages")
    return _policy_id(*legacy_policy_id(_text(value)))


def _tier_info(buf: bytes) -> bytes:
    return _rewrite(buf, dict.fromkeys(_TIER_POLICY_FIELDS, _tier_entry))


def _old_id(buf: bytes) -> tuple[bytes, str]:
    """Today's PolicyID for an old one, and the tier it named."""
    name = tier = ""
    for f in iter_fields(buf):
        if f.number == _ID_NAME:
            name = _text(f.value)
        elif f.number == _OLD_ID_TIER:
            tier = _text(f.value)
        elif f.number in (_ID_NAMESPACE, _ID_KIND):
            raise NewerFormError("PolicyID has namespace/kind (fields 3/4)")
    return _policy_id(*legacy_policy_id(name)), tier


def _active_policy_update(buf: bytes) -> bytes:
    out = bytearray()
    tier = ""
    policy: bytes | None = None
    for f in iter_fields(buf):
        if f.number == 1 and f.wire_type == LEN:
            assert isinstance(f.value, bytes)
            new_id, tier = _old_id(f.value)
            out += encode_len(1, new_id)
        elif f.number == 2 and f.wire_type == LEN:
            assert isinstance(f.value, bytes)
            policy = f.value
        else:
            out += f.raw
    # Policy.tier (8) is where v3.32 carries what the old PolicyID did.
    body = policy or b""
    if tier:
        body += encode_len(_POLICY_TIER, tier.encode())
    if policy is not None or tier:
        out += encode_len(2, body)
    return bytes(out)


def _active_policy_remove(buf: bytes) -> bytes:
    return _rewrite(buf, {1: lambda v: _old_id(v)[0]})


def _host_endpoint(buf: bytes) -> bytes:
    return _rewrite(buf, dict.fromkeys(_HEP_TIERS, _tier_info))


def transcode(body: bytes) -> tuple[bytes, bool]:
    """A v3.30-v3.31 ``ToDataplane`` envelope in today's encoding.

    Returns:
        The envelope's bytes, and whether a ``WorkloadEndpoint`` carried
        v3.30.1-v3.30.7's WorkloadType enum (dropped).

    Raises:
        NewerFormError: it carries a v3.32+ policy reference.
        WireError: the bytes are not a well-formed envelope.
    """
    dropped: list[int] = []

    def workload_endpoint(buf: bytes) -> bytes:
        return _rewrite(buf, dict.fromkeys(_WEP_TIERS, _tier_info), drop=dropped)

    payloads: dict[int, Callable[[bytes], bytes]] = {
        _ACTIVE_POLICY_UPDATE: _active_policy_update,
        _ACTIVE_POLICY_REMOVE: _active_policy_remove,
        _WORKLOAD_ENDPOINT_UPDATE: lambda b: _rewrite(b, {_WEP_UPDATE_ENDPOINT: workload_endpoint}),
        _HOST_ENDPOINT_UPDATE: lambda b: _rewrite(b, {_HEP_UPDATE_ENDPOINT: _host_endpoint}),
    }
    return _rewrite(body, payloads), bool(dropped)


class Sniff:
    """What an envelope's bytes say about the policy format (None: nothing)."""

    __slots__ = ("legacy", "what")

    def __init__(self) -> None:
        self.legacy: bool | None = None
        self.what = ""

    def _found(self, legacy: bool, what: str) -> None:
        if self.legacy is None:
            self.legacy, self.what = legacy, what


def _sniff_id(buf: bytes, payload: str, out: Sniff) -> None:
    for f in iter_fields(buf):
        if f.number == _OLD_ID_TIER:
            out._found(True, f"{payload}: PolicyID.tier (field 1) is set")
        elif f.number in (_ID_NAMESPACE, _ID_KIND):
            out._found(False, f"{payload}: PolicyID has namespace/kind (fields 3/4)")


def _sniff_tiers(buf: bytes, tier_fields: frozenset[int], payload: str, out: Sniff) -> None:
    for f in iter_fields(buf):
        if f.number not in tier_fields or not isinstance(f.value, bytes):
            continue
        for entry in iter_fields(f.value):
            if entry.number in _TIER_POLICY_FIELDS and isinstance(entry.value, bytes):
                if entry.value and entry.value[0] in _POLICY_ID_TAGS:
                    out._found(False, f"{payload}: TierInfo policies are PolicyID messages")
                elif entry.value:
                    out._found(True, f"{payload}: TierInfo policies are name strings")


def sniff(body: bytes) -> Sniff:
    """Look at an envelope's policy references without parsing it.

    Raises:
        WireError: the bytes are not a well-formed envelope.
    """
    out = Sniff()
    for f in iter_fields(body):
        if f.wire_type != LEN or f.number not in POLICY_PAYLOADS:
            continue
        assert isinstance(f.value, bytes)
        for g in iter_fields(f.value):
            if not isinstance(g.value, bytes) or g.wire_type != LEN:
                continue
            if f.number == _ACTIVE_POLICY_UPDATE and g.number == 1:
                _sniff_id(g.value, "ActivePolicyUpdate", out)
            elif f.number == _ACTIVE_POLICY_UPDATE and g.number == 2:
                for h in iter_fields(g.value):
                    if h.number == _POLICY_TIER:
                        out._found(False, "ActivePolicyUpdate: Policy.tier (field 8) is set")
            elif f.number == _ACTIVE_POLICY_REMOVE and g.number == 1:
                _sniff_id(g.value, "ActivePolicyRemove", out)
            elif f.number == _WORKLOAD_ENDPOINT_UPDATE and g.number == _WEP_UPDATE_ENDPOINT:
                _sniff_tiers(g.value, _WEP_TIERS, "WorkloadEndpointUpdate", out)
            elif f.number == _HOST_ENDPOINT_UPDATE and g.number == _HEP_UPDATE_ENDPOINT:
                _sniff_tiers(g.value, _HEP_TIERS, "HostEndpointUpdate", out)
    return out
