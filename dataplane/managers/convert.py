"""Protobuf -> model conversion, with validation.

The only place that reads protobuf field values. Every function either
returns a normalised model value or raises :class:`InputError` naming the
field path (relative to the payload) and the offending value; the loop adds
the sequence number and message type. Nothing here has side effects, so a
rejected message leaves all state untouched.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

from google.protobuf.message import Message

from dataplane.errors import InputError
from dataplane.managers.convert_qos import dscp_policies, qos_controls
from dataplane.managers.scalars import address, at, cidr, non_empty
from dataplane.model import (
    PROTOCOL_NUMBERS,
    Action,
    HostEndpoint,
    HostEndpointKey,
    IcmpMatch,
    NatInfo,
    Policy,
    PolicyKey,
    PortRange,
    Profile,
    Rule,
    TierInfo,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)
from dataplane.wire._pb import felixbackend_pb2 as pb

T = TypeVar("T")

_ACTIONS = {
    "allow": Action.ALLOW,
    "deny": Action.DENY,
    "next-tier": Action.PASS,
    "pass": Action.PASS,
    "log": Action.LOG,
}

_PROTOCOL_NAMES = {number: name for name, number in PROTOCOL_NUMBERS.items()}
_KNOWN_PROTOCOLS = frozenset(_PROTOCOL_NAMES.values())
_PORT_PROTOCOLS = frozenset({"tcp", "udp", "sctp", "udplite"})
_ICMP_PROTOCOLS = frozenset({"icmp", "icmpv6"})


# ---------------------------------------------------------------------------
# Rules, policies, profiles.
# ---------------------------------------------------------------------------


def _protocol(proto: pb.Protocol, field: str) -> str | None:
    which = proto.WhichOneof("number_or_name")
    if which is None:
        return None
    if which == "number":
        number = proto.number
        # 0 would mean "any protocol" to iptables, not IPv6 hop-by-hop.
        if not 1 <= number <= 255:
            raise InputError(f"{field}.number", number, "protocol number out of range 1-255")
        return _PROTOCOL_NAMES.get(number, str(number))
    name = proto.name.lower()
    if name not in _KNOWN_PROTOCOLS:
        if name.isdigit() and 1 <= int(name) <= 255 and name == str(int(name)):
            return _PROTOCOL_NAMES.get(int(name), name)
        raise InputError(f"{field}.name", proto.name, "unknown protocol name")
    return name


# The helpers below run for every field of every rule; most fields are
# empty, so they return early and build field paths only to report errors.


def _ports(ranges: Sequence[pb.PortRange], prefix: str, name: str) -> tuple[PortRange, ...]:
    if not ranges:
        return ()
    out = []
    for i, r in enumerate(ranges):
        first, last = r.first, r.last or r.first
        if not (0 <= first <= 65535 and 0 <= last <= 65535) or first > last:
            raise InputError(
                f"{prefix}.{name}[{i}]", f"{r.first}-{r.last}", "not a port range in 0-65535"
            )
        out.append(PortRange(first, last))
    return tuple(out)


def _icmp(rule: pb.Rule, oneof: str, prefix: str) -> IcmpMatch | None:
    which = rule.WhichOneof(oneof)
    if which is None:
        return None
    if which.endswith("_type_code"):
        tc = getattr(rule, which)
        match = IcmpMatch(tc.type, tc.code)
    else:
        match = IcmpMatch(getattr(rule, which))
    # Type 255 is iptables' "any type", so it cannot name a real one.
    if not 0 <= match.type <= 254 or not (match.code is None or 0 <= match.code <= 255):
        raise InputError(f"{prefix}.{which}", str(match), "ICMP type must be 0-254 and code 0-255")
    return match


def _nets(nets: Sequence[str], prefix: str, name: str) -> tuple[str, ...]:
    if not nets:
        return ()
    out = []
    for i, net in enumerate(nets):
        try:
            out.append(cidr(net, name))
        except InputError as exc:
            raise at(exc, f"{prefix}.{name}[{i}]") from None
    return tuple(out)


def _ids(ids: Sequence[str], prefix: str, name: str) -> tuple[str, ...]:
    if not ids:
        return ()
    out = tuple(ids)
    if not all(out):
        raise InputError(f"{prefix}.{name}[{out.index('')}]", "", "must not be empty")
    return out


_SET_FIELDS = (
    "src_named_port_ip_set_ids",
    "not_src_named_port_ip_set_ids",
    "dst_named_port_ip_set_ids",
    "not_dst_named_port_ip_set_ids",
    "src_ip_set_ids",
    "not_src_ip_set_ids",
    "dst_ip_set_ids",
    "not_dst_ip_set_ids",
    "dst_ip_port_set_ids",
)
# (model attribute, proto field) for the network and port matches.
_NET_FIELDS = (
    ("src_nets", "src_net"),
    ("not_src_nets", "not_src_net"),
    ("dst_nets", "dst_net"),
    ("not_dst_nets", "not_dst_net"),
)
_PORT_FIELDS = ("src_ports", "not_src_ports", "dst_ports", "not_dst_ports")


def rule(r: pb.Rule, field: str) -> Rule:
    action = _ACTIONS.get(r.action.lower())
    if action is None:
        raise InputError(
            f"{field}.action", r.action, "expected allow, deny, pass, next-tier or log"
        )
    if r.ip_version not in (0, 4, 6):
        raise InputError(f"{field}.ip_version", r.ip_version, "expected 4, 6 or unset")
    protocol = _protocol(r.protocol, f"{field}.protocol") if r.HasField("protocol") else None
    values: dict[str, object] = {
        attr: _nets(getattr(r, name), field, name) for attr, name in _NET_FIELDS
    }
    values.update((name, _ports(getattr(r, name), field, name)) for name in _PORT_FIELDS)
    values.update((name, _ids(getattr(r, name), field, name)) for name in _SET_FIELDS)
    built = Rule(
        action=action,
        ip_version=r.ip_version or None,
        protocol=protocol,
        not_protocol=(
            _protocol(r.not_protocol, f"{field}.not_protocol")
            if r.HasField("not_protocol")
            else None
        ),
        icmp=_icmp(r, "icmp", field),
        not_icmp=_icmp(r, "not_icmp", field),
        rule_id=r.rule_id,
        **values,  # type: ignore[arg-type]
    )
    # Port matches need a protocol with ports (iptables' multiport insists,
    # and HNS has no portless-protocol port match either).
    has_ports = built.src_ports or built.dst_ports or built.not_src_ports or built.not_dst_ports
    if has_ports and protocol not in _PORT_PROTOCOLS:
        raise InputError(f"{field}.protocol", protocol or "", "port matches need tcp, udp, sctp")
    if (built.icmp or built.not_icmp) and protocol not in _ICMP_PROTOCOLS:
        raise InputError(f"{field}.protocol", protocol or "", "ICMP matches need icmp or icmpv6")
    return built


class _Memo(Generic[T]):
    """Converted values of identical messages, keyed by their serialization.

    Felix re-sends a whole policy whenever any part of it changes, and every
    endpoint of a namespace carries the same tier lists, so the same rules
    and tiers arrive many times over. Model values are immutable, so each
    distinct message is converted (and validated) once while its value is
    in use. Values are held weakly: an entry goes when the last policy,
    profile or endpoint holding its value does, so the memo is bounded by
    what the node holds, however many distinct rules churn through it.
    """

    def __init__(self) -> None:
        refs: dict[bytes, weakref.KeyedRef[bytes, T]] = {}

        def forget(ref: weakref.KeyedRef[bytes, T]) -> None:
            # Its value is gone; unless the key was converted again since.
            if refs.get(ref.key) is ref:
                refs.pop(ref.key, None)

        self._refs = refs
        self._forget = forget

    def __len__(self) -> int:
        return len(self._refs)

    def get(self, msg: Message, convert: Callable[[], T]) -> T:
        key = msg.SerializeToString(deterministic=True)
        ref = self._refs.get(key)
        if ref is not None:
            value = ref()
            if value is not None:
                return value
        value = convert()
        self._refs[key] = weakref.KeyedRef(value, self._forget, key)
        return value


_RULES: _Memo[Rule] = _Memo()
_TIERS: _Memo[TierInfo] = _Memo()


def _rules(rules: Sequence[pb.Rule], field: str) -> tuple[Rule, ...]:
    return tuple(
        _RULES.get(r, lambda r=r, i=i: rule(r, f"{field}[{i}]"))  # type: ignore[misc]
        for i, r in enumerate(rules)
    )


def policy_key(pid: pb.PolicyID, field: str = "id") -> PolicyKey:
    return PolicyKey(non_empty(pid.name, f"{field}.name"), pid.namespace, pid.kind)


def policy(p: pb.Policy) -> Policy:
    return Policy(
        tier=p.tier or "default",
        inbound=_rules(p.inbound_rules, "policy.inbound_rules"),
        outbound=_rules(p.outbound_rules, "policy.outbound_rules"),
        namespace=p.namespace,
        untracked=p.untracked,
        pre_dnat=p.pre_dnat,
    )


def profile(p: pb.Profile) -> Profile:
    return Profile(
        inbound=_rules(p.inbound_rules, "profile.inbound_rules"),
        outbound=_rules(p.outbound_rules, "profile.outbound_rules"),
    )


# ---------------------------------------------------------------------------
# Endpoints.
# ---------------------------------------------------------------------------

_TIER_DEFAULTS = {"": Action.DENY, "deny": Action.DENY, "pass": Action.PASS}


def _tier(t: pb.TierInfo, path: str) -> TierInfo:
    default = _TIER_DEFAULTS.get(t.default_action.lower())
    if default is None:
        raise InputError(f"{path}.default_action", t.default_action, "expected Deny or Pass")
    return TierInfo(
        name=non_empty(t.name, f"{path}.name"),
        ingress_policies=tuple(
            policy_key(p, f"{path}.ingress_policies[{j}]") for j, p in enumerate(t.ingress_policies)
        ),
        egress_policies=tuple(
            policy_key(p, f"{path}.egress_policies[{j}]") for j, p in enumerate(t.egress_policies)
        ),
        default_action=default,
    )


def _tiers(tiers: Sequence[pb.TierInfo], field: str) -> tuple[TierInfo, ...]:
    if not tiers:
        return ()
    return tuple(
        _TIERS.get(t, lambda t=t, i=i: _tier(t, f"{field}[{i}]"))  # type: ignore[misc]
        for i, t in enumerate(tiers)
    )


def _nat(nats: Sequence[pb.NatInfo], field: str, version: int) -> tuple[NatInfo, ...]:
    return tuple(
        NatInfo(
            address(n.ext_ip, f"{field}[{i}].ext_ip", version),
            address(n.int_ip, f"{field}[{i}].int_ip", version),
        )
        for i, n in enumerate(nats)
    )


def _versioned_nets(nets: Iterable[str], field: str, version: int) -> tuple[str, ...]:
    return tuple(cidr(n, f"{field}[{i}]", version) for i, n in enumerate(nets))


def workload_key(wid: pb.WorkloadEndpointID) -> WorkloadEndpointKey:
    return WorkloadEndpointKey(
        wid.orchestrator_id,
        non_empty(wid.workload_id, "id.workload_id"),
        non_empty(wid.endpoint_id, "id.endpoint_id"),
    )


# Interface names reach chain names, -i/-o matches, netlink and sysctl
# paths. The kernel takes up to 15 bytes of almost anything; we take the
# characters real interface names use, so none can be restore syntax, a
# path step or an iptables wildcard ("cali+" would match every pod).
_IFACE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")


def interface_name(name: str, field: str) -> str:
    if not _IFACE_NAME.fullmatch(name) or name in (".", ".."):
        raise InputError(field, name, "not a valid interface name (1-15 of A-Z a-z 0-9 _ . -)")
    return name


def workload_endpoint(key: WorkloadEndpointKey, ep: pb.WorkloadEndpoint) -> WorkloadEndpoint:
    name = interface_name(ep.name, "endpoint.name")
    return WorkloadEndpoint(
        key=key,
        name=name,
        state=ep.state or "active",
        mac=ep.mac,
        profile_ids=_ids(ep.profile_ids, "endpoint", "profile_ids"),
        ipv4_nets=_versioned_nets(ep.ipv4_nets, "endpoint.ipv4_nets", 4),
        ipv6_nets=_versioned_nets(ep.ipv6_nets, "endpoint.ipv6_nets", 6),
        tiers=_tiers(ep.tiers, "endpoint.tiers"),
        ipv4_nat=_nat(ep.ipv4_nat, "endpoint.ipv4_nat", 4),
        ipv6_nat=_nat(ep.ipv6_nat, "endpoint.ipv6_nat", 6),
        allow_spoofed_source_prefixes=_nets(
            ep.allow_spoofed_source_prefixes, "endpoint", "allow_spoofed_source_prefixes"
        ),
        qos=qos_controls(ep, "endpoint.qos_controls"),
        dscp=dscp_policies(ep.qos_policies, "endpoint.qos_policies"),
    )


def host_key(hid: pb.HostEndpointID) -> HostEndpointKey:
    return HostEndpointKey(non_empty(hid.endpoint_id, "id.endpoint_id"))


def host_endpoint(key: HostEndpointKey, ep: pb.HostEndpoint) -> HostEndpoint:
    return HostEndpoint(
        key=key,
        # Felix sends interfaceName "*" as "*": every interface; the model
        # spells that "" (no real interface is called "*" or "").
        name="" if ep.name in ("", "*") else interface_name(ep.name, "endpoint.name"),
        profile_ids=_ids(ep.profile_ids, "endpoint", "profile_ids"),
        tiers=_tiers(ep.tiers, "endpoint.tiers"),
        untracked_tiers=_tiers(ep.untracked_tiers, "endpoint.untracked_tiers"),
        pre_dnat_tiers=_tiers(ep.pre_dnat_tiers, "endpoint.pre_dnat_tiers"),
        forward_tiers=_tiers(ep.forward_tiers, "endpoint.forward_tiers"),
        expected_ipv4_addrs=tuple(
            address(a, f"endpoint.expected_ipv4_addrs[{i}]", 4)
            for i, a in enumerate(ep.expected_ipv4_addrs)
        ),
        expected_ipv6_addrs=tuple(
            address(a, f"endpoint.expected_ipv6_addrs[{i}]", 6)
            for i, a in enumerate(ep.expected_ipv6_addrs)
        ),
        dscp=dscp_policies(ep.qos_policies, "endpoint.qos_policies"),
    )
