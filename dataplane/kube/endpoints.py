"""A service's EndpointSlices into the model's backends, as kube-proxy chooses them.

Facts from ``pkg/proxy/endpointslicecache.go`` and ``pkg/proxy/topology.go``
at v1.33.13:

* slices belong to the service their ``kubernetes.io/service-name`` label
  names; ``FQDN`` slices are not proxied;
* a service port's endpoints come from every slice's port of that name and
  protocol, each slice with its own number; an endpoint is its first
  address and that number, deduplicated across slices (a local one wins);
* conditions: ``ready`` and ``serving`` default to true, ``terminating``
  to false. Ready endpoints serve; when a set (cluster-wide, or this
  node's for a Local policy) has none, its serving-and-terminating ones do
  (the model's ``BackendState.TERMINATING``, chosen only then);
* topology: when every ready endpoint has node hints and one names this
  node, only those serve cluster-wide traffic here (``PreferSameNode``;
  kube-proxy's ``PreferSameTrafficDistribution``, on from v1.34); else
  when every ready endpoint has zone hints and one names this node's
  zone (its ``topology.kubernetes.io/zone`` label), only those; else all.
  Topology never narrows a Local policy's choice, nor the terminating
  fallback. An endpoint it leaves out keeps ``in_topology=False``;
* local: the endpoint's ``nodeName`` is this node.

A slice the model cannot take raises :class:`InputError` naming the field
(``endpoints[2].addresses[0]``) and the value: that slice is refused alone.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from dataplane.errors import InputError
from dataplane.managers.scalars import dotted_quad
from dataplane.model.services import Backend, BackendPort, BackendState, ServiceKey

__all__ = [
    "SERVICE_NAME_LABEL",
    "NodeInfo",
    "Slice",
    "SliceEndpoint",
    "backends",
    "not_ready",
    "parse_slice",
]

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
_PROTOCOLS = {"TCP": "tcp", "UDP": "udp", "SCTP": "sctp"}
_FAMILIES = {"IPv4": 4, "IPv6": 6}


@dataclass(frozen=True)
class NodeInfo:
    """This node, as topology and locality need it."""

    name: str
    zone: str = ""


class SliceEndpoint(NamedTuple):
    """One endpoint of a slice (a tuple: made 100,000 times at 10,000
    services, three times cheaper than a frozen dataclass)."""

    address: str
    ready: bool
    serving: bool
    terminating: bool
    node_name: str
    zone_hints: frozenset[str]
    node_hints: frozenset[str]


@dataclass(frozen=True, slots=True)
class Slice:
    service: ServiceKey
    name: str
    ports: tuple[BackendPort, ...]
    endpoints: tuple[SliceEndpoint, ...]


def _bool(value: Any, default: bool, path: str, name: str) -> bool:
    if value is None:
        return default
    if value is True or value is False:
        return bool(value)
    raise InputError(f"{path}.conditions.{name}", value, "expected true or false")


_NO_NAMES: frozenset[str] = frozenset()


def _names(entries: Any, path: str, name: str) -> frozenset[str]:
    if not entries:
        return _NO_NAMES
    if not isinstance(entries, list):
        raise InputError(f"{path}.hints.{name}", entries, "expected a list")
    return frozenset(str(e.get("name")) for e in entries if isinstance(e, dict) and e.get("name"))


def _canonical(text: Any, family: int, field: str) -> str:
    """``text`` as the model writes addresses (Python's ``ipaddress`` form).

    An IPv4 address takes the C library's parser, 20 times faster than
    ``ipaddress`` (a 10,000-service list holds 100,000 of them): glibc's
    ``inet_pton`` takes exactly four decimal octets without leading zeros,
    the strings ``ipaddress`` takes, and ``inet_ntop`` prints them back as
    ``ipaddress`` does. IPv6, with its several spellings, keeps ``ipaddress``.

    Raises:
        InputError: not an address of ``family``.
    """
    if not isinstance(text, str):  # ipaddress would take an integer
        raise InputError(field, text, "not an IP address")
    if family == 4:
        try:
            return socket.inet_ntop(socket.AF_INET, socket.inet_pton(socket.AF_INET, text))
        except (OSError, ValueError):  # ValueError: a NUL in the text
            pass  # not IPv4: ipaddress says what it is
    try:
        ip = ipaddress.ip_address(text)
    except (ValueError, TypeError):
        raise InputError(field, text, "not an IP address") from None
    if ip.version != family:
        raise InputError(field, text, f"not an IPv{family} address")
    return str(ip)


_NO_CONDITIONS: dict[str, Any] = {}


def _endpoint(raw: Any, family: int, index: int) -> SliceEndpoint | None:
    """One endpoint: the common one (an IPv4 address, conditions given as
    booleans or left out, no hints) without a call per field; any other
    through :func:`_endpoint_checked`, which says what is wrong. This
    runs for every endpoint of every slice (100,000 at 10,000 services)."""
    if type(raw) is dict and family == 4 and not raw.get("hints"):
        addresses, conditions = raw.get("addresses"), raw.get("conditions") or _NO_CONDITIONS
        if type(addresses) is list and addresses and type(conditions) is dict:
            text = addresses[0]
            ready = conditions.get("ready", True)
            serving = conditions.get("serving", True)
            terminating = conditions.get("terminating", False)
            node = raw.get("nodeName") or ""
            if (
                type(text) is str
                and type(node) is str
                and ready.__class__ is bool
                and serving.__class__ is bool
                and terminating.__class__ is bool
                and dotted_quad(text)
            ):
                name = sys.intern(node)  # a few nodes, 100,000 endpoints: one string each
                return SliceEndpoint(text, ready, serving, terminating, name, _NO_NAMES, _NO_NAMES)
    return _endpoint_checked(raw, family, index)


def _endpoint_checked(raw: Any, family: int, index: int) -> SliceEndpoint | None:
    # The field paths are made only for an error.
    if not isinstance(raw, dict):
        raise InputError(f"endpoints[{index}]", raw, "expected an object")
    addresses = raw.get("addresses") or []
    if not isinstance(addresses, list):
        raise InputError(f"endpoints[{index}].addresses", addresses, "expected a list")
    if not addresses:
        return None  # kube-proxy skips it ("empty address")
    path = f"endpoints[{index}]"
    address = _canonical(addresses[0], family, f"{path}.addresses[0]")
    conditions = raw.get("conditions") or {}
    hints = raw.get("hints")
    if not isinstance(conditions, dict):
        raise InputError(f"{path}.conditions", conditions, "expected an object")
    if hints and not isinstance(hints, dict):
        raise InputError(f"{path}.hints", hints, "expected an object")
    return SliceEndpoint(
        address,
        _bool(conditions.get("ready"), True, path, "ready"),
        _bool(conditions.get("serving"), True, path, "serving"),
        _bool(conditions.get("terminating"), False, path, "terminating"),
        sys.intern(str(raw.get("nodeName") or "")),  # a few nodes, 100,000 endpoints
        _names(hints.get("forZones"), path, "forZones") if hints else _NO_NAMES,
        _names(hints.get("forNodes"), path, "forNodes") if hints else _NO_NAMES,
    )


def _ports(raw: Any) -> tuple[BackendPort, ...]:
    if not isinstance(raw, list):
        raise InputError("ports", raw, "expected a list")
    out = []
    for i, p in enumerate(raw):
        if not isinstance(p, dict):
            raise InputError(f"ports[{i}]", p, "expected an object")
        name, number = p.get("name", ""), p.get("port")
        if name is None or number is None or number == 0:
            continue  # kube-proxy ignores a port without a name or a number
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 65535:
            raise InputError(f"ports[{i}].port", number, "a port must be 1-65535")
        text = p.get("protocol") or "TCP"
        protocol = _PROTOCOLS.get(text) if isinstance(text, str) else None
        if protocol is None:
            raise InputError(f"ports[{i}].protocol", text, "expected TCP, UDP or SCTP")
        out.append(BackendPort(str(name), protocol, number))
    return tuple(out)


def parse_slice(obj: dict[str, Any]) -> Slice | None:
    """One EndpointSlice; None for an FQDN one (not proxied).

    Raises:
        InputError: no service label, an unknown address type, an address
            of the wrong family, a port out of range (named, with its value).
    """
    meta = obj.get("metadata") or {}
    service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    if not service:
        raise InputError(f"metadata.labels[{SERVICE_NAME_LABEL}]", service, "missing")
    kind = obj.get("addressType")
    if kind == "FQDN":
        return None
    family = _FAMILIES.get(kind) if isinstance(kind, str) else None
    if family is None:
        raise InputError("addressType", kind, "expected IPv4, IPv6 or FQDN")
    raw = obj.get("endpoints") or []
    if not isinstance(raw, list):
        raise InputError("endpoints", raw, "expected a list")
    endpoints = tuple(e for i, r in enumerate(raw) if (e := _endpoint(r, family, i)) is not None)
    return Slice(
        ServiceKey(str(meta.get("namespace") or ""), str(service)),
        str(meta.get("name") or ""),
        _ports(obj.get("ports") or []),
        endpoints,
    )


def _mode(endpoints: Iterable[SliceEndpoint], node: NodeInfo) -> str:
    """kube-proxy's topologyModeFromHints: "node", "zone" or "" (no narrowing)."""
    ready = [e for e in endpoints if e.ready]
    if not ready:
        return ""
    if all(e.node_hints for e in ready) and any(node.name in e.node_hints for e in ready):
        return "node"
    if all(e.zone_hints for e in ready) and any(node.zone in e.zone_hints for e in ready):
        return "zone"
    return ""


def _in_topology(endpoint: SliceEndpoint, mode: str, node: NodeInfo) -> bool:
    if mode == "node":
        return node.name in endpoint.node_hints
    if mode == "zone":
        return node.zone in endpoint.zone_hints
    return True


def _state(endpoint: SliceEndpoint) -> BackendState | None:
    if endpoint.ready:
        return BackendState.ACTIVE
    if endpoint.serving and endpoint.terminating:
        return BackendState.TERMINATING
    return None  # neither ready nor serving: never chosen


# address, local, state's value, node, in topology: sorted as a plain tuple.
_Group = tuple[str, bool, str, str, bool]
_STATES = {state.value: state for state in BackendState}


def backends(slices: Iterable[Slice], node: NodeInfo) -> tuple[Backend, ...]:
    """The service's backends for this node, from all of its slices."""
    slices = sorted(slices, key=lambda s: s.name)  # deterministic dedup order
    if len(slices) == 1:
        alone = _one_slice(slices[0], node)
        if alone is not None:
            return alone
    return _merged(slices, node)


def _one_slice(s: Slice, node: NodeInfo) -> tuple[Backend, ...] | None:
    """:func:`_merged` of one slice whose addresses and ports (by name and
    protocol) are all distinct, the common case: nothing to merge, so
    each endpoint is one backend with every port (the values of 10,000
    services of 10: 0.22 s where they took 0.28-0.30 s). None: not that
    case."""
    if not s.ports:
        return ()
    columns = sorted((p.name, p.protocol, p.port) for p in s.ports)
    if len({(name, protocol) for name, protocol, _ in columns}) != len(columns):
        return None
    endpoints = s.endpoints
    if len({e.address for e in endpoints}) != len(endpoints):
        return None
    ports = tuple(BackendPort(*column) for column in columns)
    mode = _mode(endpoints, node)
    out = []
    for e in sorted(endpoints, key=lambda e: e.address):
        state = _state(e)
        if state is None:
            continue
        topology = state is not BackendState.ACTIVE or _in_topology(e, mode, node)
        local = e.node_name == node.name
        out.append(Backend(e.address, ports, local, state, e.node_name, topology))
    return tuple(out)


def _merged(slices: Sequence[Slice], node: NodeInfo) -> tuple[Backend, ...]:
    """Every slice's endpoints, an address in two slices (or twice in one)
    once, a local one first; an address with two numbers for one port two
    backends, as kube-proxy has them."""
    by_port: dict[tuple[str, str], dict[tuple[str, int], SliceEndpoint]] = {}
    for s in slices:
        for port in s.ports:
            chosen = by_port.setdefault((port.name, port.protocol), {})
            for e in s.endpoints:
                key = (e.address, port.port)
                if key not in chosen or e.node_name == node.name:
                    chosen[key] = e
    groups: dict[_Group, dict[tuple[str, str], list[int]]] = {}
    for (name, protocol), chosen in sorted(by_port.items()):
        mode = _mode(chosen.values(), node)
        column = (name, protocol)
        for (address, number), e in chosen.items():
            state = _state(e)
            if state is None:
                continue
            topology = state is not BackendState.ACTIVE or _in_topology(e, mode, node)
            group = (address, e.node_name == node.name, state.value, e.node_name, topology)
            groups.setdefault(group, {}).setdefault(column, []).append(number)
    out = []
    # Endpoints of one service mostly share their ports: one tuple for all.
    shared: dict[tuple[tuple[str, str, int], ...], tuple[BackendPort, ...]] = {}
    for (address, local, value, node_name, topology), ports in sorted(groups.items()):
        spec_list: list[tuple[tuple[str, str, int], ...]]
        if len(ports) == 1 and len(numbers := next(iter(ports.values()))) == 1:
            # The common endpoint: one port, one number (no sorting to do).
            spec_list = [((*next(iter(ports)), numbers[0]),)]
        else:
            columns = [
                (name, proto, sorted(numbers)) for (name, proto), numbers in sorted(ports.items())
            ]
            # An address with two numbers for one port (two slices disagreeing)
            # is two endpoints, as in kube-proxy: one backend for each.
            spec_list = [
                tuple((name, proto, ns[i]) for name, proto, ns in columns if i < len(ns))
                for i in range(max(len(ns) for _, _, ns in columns))
            ]
        for spec in spec_list:
            shared_ports = shared.get(spec)
            if shared_ports is None:
                shared_ports = shared[spec] = tuple(BackendPort(*k) for k in spec)
            out.append(Backend(address, shared_ports, local, _STATES[value], node_name, topology))
    return tuple(out)


def not_ready(slices: Iterable[Slice]) -> tuple[str, ...]:
    """Addresses no port of the service may use: neither ready nor serving anywhere.

    For ``show`` only (why an endpoint gets no traffic); an address that is
    usable in one slice is not listed because another slice says otherwise.
    """
    endpoints = [e for s in slices for e in s.endpoints]
    unusable = {e.address for e in endpoints if _state(e) is None}
    if unusable:  # rare: a second pass only then
        unusable -= {e.address for e in endpoints if _state(e) is not None}
    return tuple(sorted(unusable, key=_address_order))


def _address_order(address: str) -> tuple[int, int]:
    ip = ipaddress.ip_address(address)
    return ip.version, int(ip)
