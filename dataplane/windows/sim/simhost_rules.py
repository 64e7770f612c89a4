"""What HNS refuses: the simulated host's checks, as pure functions over HCN V2 JSON.

:mod:`dataplane.windows.sim.simhost` holds the objects and performs the calls;
before it changes anything it asks these functions whether HNS would take
the call. Each takes the objects involved and the host's
:class:`~dataplane.windows.hns.hcn.HnsVersion` and raises
:class:`~dataplane.windows.hns.hcn.HcnError` with the HRESULT HNS returns, so a
refused call changes nothing. None of them mutates its arguments.
"""

from __future__ import annotations

import copy
import functools
import ipaddress
import re
import uuid
from collections.abc import Mapping

from dataplane.windows.hns.acl import comma_list, parse_acl
from dataplane.windows.hns.hcn import (
    E_FAIL,
    E_INVALIDARG,
    E_NOTIMPL,
    ENDPOINT_REMOTE,
    ERROR_ALREADY_EXISTS,
    HCN_E_ENDPOINT_NOT_FOUND,
    HCN_E_INVALID_POLICY,
    HCN_E_INVALID_POLICY_TYPE,
    LB_DSR,
    LB_IPV6,
    LB_PROTOCOLS,
    PM_LOCAL_ROUTED_VIP,
    HcnError,
    HnsVersion,
    Json,
)

__all__ = [
    "check_endpoint",
    "check_endpoint_policies",
    "check_endpoint_unused",
    "check_load_balancer",
    "check_network_policies",
    "guid",
    "policy_request",
    "set_id",
]

_REQUEST_TYPES = ("Add", "Remove", "Update")
_MAC = re.compile(r"[0-9a-fA-F]{2}(?:-[0-9a-fA-F]{2}){5}")  # HNS spells MACs dashed
_PROTOCOLS = frozenset(LB_PROTOCOLS.values())  # TCP, UDP, SCTP: what an HNS load balancer maps


# Every create checks the new object against every existing one (addresses,
# frontends): parsing each id and address once, not once per check, keeps
# a 3,000-endpoint host from spending minutes of the benchmark on parsing.
def guid(text: str) -> str:
    """HNS ids compare case-insensitively; keep them in one spelling."""
    return _guid(text if isinstance(text, str) else str(text))


@functools.lru_cache(maxsize=1 << 16)
def _guid(text: str) -> str:
    try:
        return str(uuid.UUID(text)).upper()
    except ValueError:
        return text.upper()


def policy_request(request: Json, call: str, target: str) -> tuple[str, list[Json]]:
    """A ``ModifySettingRequest``'s kind and (copied) policies, if HNS can read it."""
    kind = request.get("RequestType")
    settings = request.get("Settings") or {}
    policies = settings.get("Policies") if isinstance(settings, dict) else None
    if request.get("ResourceType") != "Policy" or kind not in _REQUEST_TYPES:
        raise HcnError(call, target, HCN_E_INVALID_POLICY, f"request {request!r}"[:200])
    if not isinstance(policies, list) or not all(isinstance(p, dict) for p in policies):
        raise HcnError(call, target, HCN_E_INVALID_POLICY, "Settings.Policies is not a list")
    return str(kind), copy.deepcopy(policies)


def set_id(policy: Json) -> str | None:
    """The ``Id`` of a ``SetPolicy``; None for any other policy."""
    if policy.get("Type") != "SetPolicy":
        return None
    return str((policy.get("Settings") or {}).get("Id"))


def _set_ids(network: Json) -> frozenset[str]:
    """The ids of the network's sets: what an ACL address may name besides an address."""
    return frozenset(sid for p in network.get("Policies") or () if (sid := set_id(p)) is not None)


def check_endpoint_policies(
    network: Json, policies: list[Json], version: HnsVersion, call: str, target: str
) -> None:
    """Endpoint policies HNS takes: ACLs it can parse, naming the network's sets or addresses."""
    set_ids = _set_ids(network)
    for policy in policies:
        _check_endpoint_policy(policy, set_ids, version, call, target)


def _check_qos(settings: Json, call: str, target: str) -> None:
    """hcsshim's QosPolicySetting: one uint64, MaximumOutgoingBandwidthInBytes."""
    value = settings.get("MaximumOutgoingBandwidthInBytes")
    if set(settings) != {"MaximumOutgoingBandwidthInBytes"} or not (
        isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64
    ):
        raise HcnError(call, target, HCN_E_INVALID_POLICY, f"QOS settings {settings!r}"[:200])


def _check_endpoint_policy(
    policy: Json, set_ids: frozenset[str], version: HnsVersion, call: str, target: str
) -> None:
    kind = policy.get("Type")
    if kind == "ProviderAddress":
        address = (policy.get("Settings") or {}).get("ProviderAddress")
        if _address(address) is None:
            raise HcnError(call, target, HCN_E_INVALID_POLICY, f"ProviderAddress {address!r}")
        return
    if kind == "QOS":
        _check_qos(policy.get("Settings") or {}, call, target)
        return
    if kind != "ACL":
        raise HcnError(call, target, HCN_E_INVALID_POLICY_TYPE, f"policy type {kind!r}")
    try:
        rule = parse_acl(policy.get("Settings") or {})
    except ValueError as exc:
        raise HcnError(call, target, HCN_E_INVALID_POLICY, str(exc)) from None
    for token in (*rule.local_addresses, *rule.remote_addresses):
        if token in set_ids:
            continue
        try:
            net = ipaddress.ip_network(token, strict=False)
        except ValueError:
            raise HcnError(call, target, HCN_E_INVALID_POLICY, f"address {token!r}") from None
        if net.version == 6 and not version.supports("IPv6DualStack"):
            raise HcnError(call, target, HCN_E_INVALID_POLICY, f"IPv6 before 11.10: {token}")


def check_network_policies(
    network: Json, kind: str, policies: list[Json], version: HnsVersion
) -> None:
    """Network policies HNS takes: sets its version knows, routes it can program here."""
    target = str(network.get("ID", ""))
    for policy in policies:
        _check_network_policy(policy, version, target)
        if policy.get("Type") == "RemoteSubnetRoute" and kind != "Remove":
            why = _route_problem(network, policy.get("Settings") or {}, version)
            if why:
                raise HcnError("ModifyNetwork", target, HCN_E_INVALID_POLICY, why)


def _check_network_policy(policy: Json, version: HnsVersion, target: str) -> None:
    kind = policy.get("Type")
    settings = policy.get("Settings") or {}
    if kind == "RemoteSubnetRoute":
        for key in ("DestinationPrefix", "ProviderAddress", "DistributedRouterMacAddress"):
            if not isinstance(settings.get(key), str) or not settings[key]:
                raise HcnError("ModifyNetwork", target, HCN_E_INVALID_POLICY, f"{key} missing")
        return
    if kind != "SetPolicy":
        raise HcnError("ModifyNetwork", target, HCN_E_INVALID_POLICY_TYPE, f"policy type {kind!r}")
    if not version.supports("SetPolicy"):
        raise HcnError("ModifyNetwork", target, HCN_E_INVALID_POLICY_TYPE, "SetPolicy before 13.0")
    set_type = settings.get("PolicyType")
    if set_type == "NESTEDIPSET" and not version.supports("NestedIpSet"):
        raise HcnError(
            "ModifyNetwork", target, HCN_E_INVALID_POLICY_TYPE, "nested sets before 15.0"
        )
    if set_type not in ("IPSET", "NESTEDIPSET") or not settings.get("Id"):
        raise HcnError("ModifyNetwork", target, HCN_E_INVALID_POLICY, f"SetPolicy {settings!r}")
    try:
        members = comma_list(settings.get("Values"), "Values")
        for value in members if set_type == "IPSET" else ():
            ipaddress.ip_network(value, strict=False)
    except ValueError as exc:
        raise HcnError("ModifyNetwork", target, HCN_E_INVALID_POLICY, str(exc)) from None


def _route_problem(network: Json, settings: Json, version: HnsVersion) -> str | None:
    """Why HNS refuses this ``RemoteSubnetRoute`` on ``network`` (None: it takes it)."""
    if not version.supports("RemoteSubnet"):
        return "RemoteSubnetRoute before 9.2"
    if str(network.get("Type", "")).lower() != "overlay":
        return f"RemoteSubnetRoute on a {network.get('Type')} network"
    vni = settings.get("IsolationId")
    if not isinstance(vni, int) or isinstance(vni, bool) or not 0 < vni <= 0xFFFF:
        return f"IsolationId {vni!r} is not a 16-bit VSID"  # uint16 in hcsshim's schema
    try:
        ipaddress.ip_network(settings["DestinationPrefix"], strict=False)
        ipaddress.ip_address(settings["ProviderAddress"])
    except (ValueError, TypeError, KeyError) as exc:
        return f"RemoteSubnetRoute address: {exc}"
    if not _MAC.fullmatch(str(settings.get("DistributedRouterMacAddress"))):
        return f"DistributedRouterMacAddress {settings.get('DistributedRouterMacAddress')!r}"
    return None


def check_endpoint(network: Json, endpoint: Json, endpoints: Mapping[str, Json], call: str) -> None:
    """An endpoint HNS creates on ``network`` among the host's ``endpoints``.

    A remote endpoint (``Flags`` bit 1: kube-proxy's stand-in for a pod on
    another node) has exactly one valid address and a dashed MAC, and on an
    Overlay network a ``ProviderAddress`` policy naming the node that hosts
    it. Any endpoint's addresses are its own within the network.
    """
    target = str(endpoint["ID"])
    flags = _number(endpoint, "Flags")
    if flags is None:
        raise HcnError(call, target, E_INVALIDARG, f"Flags {endpoint.get('Flags')!r}")
    if flags & ENDPOINT_REMOTE:
        _check_remote(network, endpoint, call)
    held = {
        address: other_id
        for other_id, other in endpoints.items()
        if guid(other.get("HostComputeNetwork", "")) == guid(network.get("ID", ""))
        for address in _addresses(other)
    }
    for address in _addresses(endpoint):
        if address in held:
            why = f"{address} is held by endpoint {held[address]}"
            raise HcnError(call, target, ERROR_ALREADY_EXISTS, why)


def _check_remote(network: Json, endpoint: Json, call: str) -> None:
    target = str(endpoint["ID"])
    configs = endpoint.get("IpConfigurations") or []
    if len(configs) != 1 or not isinstance(configs[0], dict):
        why = f"a remote endpoint has one IpConfigurations entry, not {len(configs)}"
        raise HcnError(call, target, E_INVALIDARG, why)
    if _address(configs[0].get("IpAddress")) is None:
        raise HcnError(call, target, E_INVALIDARG, f"IpAddress {configs[0].get('IpAddress')!r}")
    if not _MAC.fullmatch(str(endpoint.get("MacAddress", ""))):
        raise HcnError(call, target, E_INVALIDARG, f"MacAddress {endpoint.get('MacAddress')!r}")
    kinds = {p.get("Type") for p in endpoint.get("Policies") or ()}
    if str(network.get("Type", "")).lower() == "overlay" and "ProviderAddress" not in kinds:
        why = "a remote endpoint on an Overlay network needs a ProviderAddress policy"
        raise HcnError(call, target, HCN_E_INVALID_POLICY, why)


def check_endpoint_unused(endpoint_id: str, load_balancers: Mapping[str, Json]) -> None:
    """The simulated host's model: an endpoint a load balancer still lists cannot be deleted.

    HNS keeps each load balancer's endpoint list consistent; here that
    means ``DeleteEndpoint`` fails (``E_FAIL``, the record naming the load
    balancer) until the load balancer is modified or deleted.
    """
    for lb_id, lb in load_balancers.items():
        if guid(endpoint_id) in {guid(m) for m in lb.get("HostComputeEndpoints") or ()}:
            why = f"in use by load balancer {lb_id}"
            raise HcnError("DeleteEndpoint", endpoint_id, E_FAIL, why)


def check_load_balancer(
    lb: Json,
    call: str,
    *,
    endpoints: Mapping[str, Json],
    load_balancers: Mapping[str, Json],
    version: HnsVersion,
    skip: str | None,
) -> None:
    """A load balancer HNS takes; ``skip`` is the id of the one it replaces (modify)."""
    target = str(lb["ID"])
    mappings, members = lb.get("PortMappings"), lb.get("HostComputeEndpoints")
    if not (isinstance(mappings, list) and mappings and isinstance(members, list) and members):
        raise HcnError(call, target, HCN_E_INVALID_POLICY, "no port mappings or endpoints")
    for member in members:
        if guid(str(member)) not in endpoints:
            raise HcnError(call, target, HCN_E_ENDPOINT_NOT_FOUND, f"endpoint {member} not found")
    for mapping in mappings:
        problem = _mapping_problem(mapping, version)
        if problem:
            raise HcnError(call, target, *problem)
    problem = _flags_problem(lb, version)
    if problem:
        raise HcnError(call, target, *problem)
    mine = _frontends(lb)
    for other_id, other in load_balancers.items():
        if other_id != skip and _frontends(other) & mine:
            raise HcnError(call, target, ERROR_ALREADY_EXISTS, f"frontend of {other_id}")


def _mapping_problem(mapping: object, version: HnsVersion) -> tuple[int, str] | None:
    """Why HNS refuses one ``PortMappings`` entry: (HRESULT, record), or None."""
    if not isinstance(mapping, dict):
        return HCN_E_INVALID_POLICY, f"port mapping {mapping!r}"
    if _number(mapping, "Protocol") not in _PROTOCOLS:
        return HCN_E_INVALID_POLICY, f"Protocol {mapping.get('Protocol')!r}"
    for key in ("InternalPort", "ExternalPort"):
        port = _number(mapping, key)
        if port is None or not 0 < port <= 0xFFFF:
            return HCN_E_INVALID_POLICY, f"{key} {mapping.get(key)!r}"
    if _number(mapping, "Flags") is None:
        return HCN_E_INVALID_POLICY, f"port mapping Flags {mapping.get('Flags')!r}"
    distribution = _number(mapping, "DistributionType")
    if distribution not in (0, 1, 2):
        return HCN_E_INVALID_POLICY, f"DistributionType {mapping.get('DistributionType')!r}"
    if distribution and not version.supports("SessionAffinity"):
        return E_NOTIMPL, f"session affinity before 12.0 (HNS {version})"
    return None


def _flags_problem(lb: Json, version: HnsVersion) -> tuple[int, str] | None:
    """Why HNS refuses the LB's ``Flags`` and addresses: (HRESULT, record), or None."""
    flags = _number(lb, "Flags")
    if flags is None:
        return HCN_E_INVALID_POLICY, f"Flags {lb.get('Flags')!r}"
    if flags & LB_DSR and not version.supports("DSR"):
        return E_NOTIMPL, f"DSR not supported by HNS {version}"
    ipv6 = bool(flags & LB_IPV6)
    if ipv6 and not version.supports("IPv6DualStack"):
        return E_NOTIMPL, f"IPv6 load balancing before 11.10 (HNS {version})"
    vips = lb.get("FrontendVIPs") or []
    if not isinstance(vips, list):
        return HCN_E_INVALID_POLICY, f"FrontendVIPs {vips!r}"
    for vip in vips:
        address = _address(vip)
        if address is None:
            return HCN_E_INVALID_POLICY, f"FrontendVIP {vip!r}"
        if (address.version == 6) != ipv6:
            return (
                HCN_E_INVALID_POLICY,
                f"FrontendVIP {vip} with the IPv6 flag {'set' if ipv6 else 'clear'}",
            )
    source = lb.get("SourceVIP")
    if source not in (None, "") and _address(source) is None:
        return HCN_E_INVALID_POLICY, f"SourceVIP {source!r}"
    return None


def _frontends(lb: Json) -> set[tuple[str, int, int, bool]]:
    """What a load balancer listens on: (address, protocol, port, local-routed node port).

    A node-port LB (no ``FrontendVIPs``) listens on every address of its
    family, spelled as the unspecified address; only there does the
    ``LocalRoutedVIP`` flag make a second frontend on the same port.
    """
    flags = int(lb.get("Flags") or 0)
    vips = [_canonical(v) for v in lb.get("FrontendVIPs") or ()]
    node_port = not vips
    if node_port:
        vips = ["::" if flags & LB_IPV6 else "0.0.0.0"]
    return {
        (
            vip,
            int(m.get("Protocol") or 0),
            int(m.get("ExternalPort") or 0),
            node_port and bool(int(m.get("Flags") or 0) & PM_LOCAL_ROUTED_VIP),
        )
        for m in lb.get("PortMappings") or ()
        for vip in vips
    }


def _number(obj: Json, key: str) -> int | None:
    """A numeric field hcsshim marshals with omitempty: absent is 0; None if not a number."""
    value = obj.get(key, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _address(text: object) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not isinstance(text, str):
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _canonical(text: object) -> str:
    """One spelling per address, so ``fd00::1`` and ``FD00:0::1`` are the same frontend."""
    return _canonical_text(text) if isinstance(text, str) else _spelled(text)


@functools.lru_cache(maxsize=1 << 16)
def _canonical_text(text: str) -> str:
    return _spelled(text)


def _spelled(text: object) -> str:
    address = _address(text)
    return str(address) if address is not None else str(text)


def _addresses(endpoint: Json) -> list[str]:
    return [
        _canonical(config.get("IpAddress"))
        for config in endpoint.get("IpConfigurations") or ()
        if isinstance(config, dict) and config.get("IpAddress")
    ]
