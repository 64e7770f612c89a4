"""A Service object of the API into the service model, as kube-proxy reads it.

Facts from ``pkg/proxy/serviceport.go``, ``pkg/proxy/util`` and
``pkg/api/v1/service/util.go`` at v1.33.13:

* skipped: no cluster IP (headless, ``None``) and ``ExternalName``
  (:func:`service` returns None);
* cluster IPs from ``spec.clusterIPs`` (dual stack, one per family), else
  ``spec.clusterIP``;
* ``externalTrafficPolicy: Local`` counts only for a service reachable from
  outside (NodePort, LoadBalancer, or a ClusterIP with external IPs);
  ``internalTrafficPolicy: Local`` always;
* session affinity ``ClientIP`` with ``sessionAffinityConfig.clientIP.
  timeoutSeconds`` (10800 when absent);
* load-balancer IPs: ``status.loadBalancer.ingress[].ip`` whose ``ipMode``
  is ``VIP`` (or unset); a ``Proxy`` one is the load balancer's own and is
  not programmed;
* the health-check node port only for ``LoadBalancer`` with
  ``externalTrafficPolicy: Local``;
* ``loadBalancerSourceRanges`` trimmed of the whitespace validation lets
  through.

A value the model cannot take raises :class:`InputError` naming the field
path (``spec.ports[1].port``) and the value: the one service is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dataplane.errors import InputError
from dataplane.managers.scalars import address, cidr
from dataplane.model.services import DEFAULT_AFFINITY_TIMEOUT, Service, ServiceKey, ServicePort

__all__ = ["service", "service_key"]

_PROTOCOLS = {"TCP": "tcp", "UDP": "udp", "SCTP": "sctp"}
_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")


def service_key(obj: dict[str, Any]) -> ServiceKey:
    meta = obj.get("metadata") or {}
    return ServiceKey(str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _port(value: Any, field: str, *, zero: bool = False) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(field, value, "not a port number")
    if value == 0 and zero:
        return 0
    if not 1 <= value <= 65535:
        raise InputError(field, value, "a port must be 1-65535")
    return value


def _strings(value: Any, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(field, value, "expected a list of strings")
    return value


def _ports(
    spec: dict[str, Any], node_port_ranges: Sequence[tuple[int, int]]
) -> tuple[ServicePort, ...]:
    raw = spec.get("ports") or []
    if not isinstance(raw, list):
        raise InputError("spec.ports", raw, "expected a list")
    ports = []
    seen: set[tuple[str, str]] = set()
    for i, p in enumerate(raw):
        path = f"spec.ports[{i}]"
        if not isinstance(p, dict):
            raise InputError(path, p, "expected an object")
        text = p.get("protocol") or "TCP"
        protocol = _PROTOCOLS.get(text) if isinstance(text, str) else None
        if protocol is None:
            raise InputError(f"{path}.protocol", text, "expected TCP, UDP or SCTP")
        node_port = _port(p.get("nodePort", 0), f"{path}.nodePort", zero=True)
        if node_port and not any(lo <= node_port <= hi for lo, hi in node_port_ranges):
            ranges = ",".join(f"{lo}-{hi}" for lo, hi in node_port_ranges)
            raise InputError(f"{path}.nodePort", node_port, f"outside the node port range {ranges}")
        name = p.get("name") or ""
        if not isinstance(name, str):
            raise InputError(f"{path}.name", name, "not a string")
        if (name, protocol) in seen:
            raise InputError(f"{path}.name", name, "two ports with the same name and protocol")
        seen.add((name, protocol))
        ports.append(ServicePort(name, protocol, _port(p.get("port"), f"{path}.port"), node_port))
    return tuple(ports)


def _affinity(spec: dict[str, Any]) -> tuple[bool, int]:
    kind = spec.get("sessionAffinity") or "None"
    if kind not in ("None", "ClientIP"):
        raise InputError("spec.sessionAffinity", kind, "expected None or ClientIP")
    if kind == "None":
        return False, DEFAULT_AFFINITY_TIMEOUT
    config = ((spec.get("sessionAffinityConfig") or {}).get("clientIP")) or {}
    timeout = config.get("timeoutSeconds", DEFAULT_AFFINITY_TIMEOUT)
    if not isinstance(timeout, int) or not 1 <= timeout <= 86400:
        field = "spec.sessionAffinityConfig.clientIP.timeoutSeconds"
        raise InputError(field, timeout, "must be 1-86400")
    return True, timeout


def _load_balancer_ips(obj: dict[str, Any]) -> tuple[str, ...]:
    ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    out = []
    for i, entry in enumerate(ingress):
        if not isinstance(entry, dict) or not entry.get("ip"):
            continue  # a hostname: nothing for a node to program
        if (entry.get("ipMode") or "VIP") != "VIP":
            continue  # Proxy: the load balancer answers itself, not through the node
        out.append(address(str(entry["ip"]), f"status.loadBalancer.ingress[{i}].ip"))
    return tuple(out)


def service(obj: dict[str, Any], node_port_ranges: Sequence[tuple[int, int]]) -> Service | None:
    """The model of one Service; None for one kube-proxy does not proxy.

    Raises:
        InputError: a field the model cannot take (named, with its value).
    """
    key = service_key(obj)
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise InputError("spec", spec, "expected an object")
    kind = spec.get("type") or "ClusterIP"
    if kind == "ExternalName":
        return None
    if kind not in _TYPES:
        raise InputError("spec.type", kind, "expected ClusterIP, NodePort, LoadBalancer")
    ips = _strings(spec.get("clusterIPs"), "spec.clusterIPs") or (
        [spec["clusterIP"]] if isinstance(spec.get("clusterIP"), str) else []
    )
    ips = [ip for ip in ips if ip and ip != "None"]
    if not ips:
        return None
    cluster_ips = tuple(address(ip, f"spec.clusterIPs[{i}]") for i, ip in enumerate(ips))
    external_ips = tuple(
        address(ip, f"spec.externalIPs[{i}]")
        for i, ip in enumerate(_strings(spec.get("externalIPs"), "spec.externalIPs"))
    )
    outside = kind in ("NodePort", "LoadBalancer") or bool(external_ips)
    external = spec.get("externalTrafficPolicy") or "Cluster"
    internal = spec.get("internalTrafficPolicy") or "Cluster"
    for field, value in (
        ("spec.externalTrafficPolicy", external),
        ("spec.internalTrafficPolicy", internal),
    ):
        if value not in ("Cluster", "Local"):
            raise InputError(field, value, "expected Cluster or Local")
    external_local = outside and external == "Local"
    affinity, timeout = _affinity(spec)
    ranges = _strings(spec.get("loadBalancerSourceRanges"), "spec.loadBalancerSourceRanges")
    health = 0
    if kind == "LoadBalancer" and external_local:
        health = _port(spec.get("healthCheckNodePort", 0), "spec.healthCheckNodePort", zero=True)
    return Service(
        key=key,
        type=kind,
        cluster_ips=cluster_ips,
        external_ips=external_ips,
        load_balancer_ips=_load_balancer_ips(obj),
        ports=_ports(spec, node_port_ranges),
        session_affinity=affinity,
        affinity_timeout=timeout,
        external_local=external_local,
        internal_local=internal == "Local",
        source_ranges=tuple(
            cidr(r.strip(), f"spec.loadBalancerSourceRanges[{i}]") for i, r in enumerate(ranges)
        ),
        health_check_node_port=health,
    )
