"""A snapshot as records: what ``/state`` serves and ``show`` prints.

Every desired object becomes one JSON object with at least ``kind``,
``id``, ``status`` (``pending``, ``done``, ``error``), ``since`` (RFC 3339,
UTC) and ``error`` (null unless ``error``), plus the fields an operator
reads for that kind (an endpoint's interface, addresses, oper status and
policies per tier; a service's source, frontends and endpoints, each with
the traffic it is chosen for or why not; a set's size).
The same function renders a live driver's snapshot and a replayed log's,
so the two compare equal when the states do (``since`` aside).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from dataplane.model import (
    DscpPolicy,
    EffectivePolicy,
    HostEffectivePolicy,
    HostEndpoint,
    IPPool,
    IPSet,
    Policy,
    Profile,
    WorkloadEndpoint,
)
from dataplane.model.effective import DirectionPolicy
from dataplane.model.hosts import Host
from dataplane.model.routes import Route, Vtep
from dataplane.model.services import Backend, BackendState, Service
from dataplane.ops.kinds import KIND_ORDER
from dataplane.ops.objects import ObjectRecord, Snapshot
from dataplane.ops.qos_text import describe

__all__ = ["KIND_ORDER", "records", "rfc3339", "state_document"]

Record = dict[str, Any]


def rfc3339(unix: float) -> str:
    return (
        datetime.fromtimestamp(unix, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def _tiers(direction: DirectionPolicy) -> list[dict[str, Any]]:
    return [
        {
            "tier": t.name,
            "policies": [str(k) for k in t.policies],
            "default_action": t.default_action.value,
        }
        for t in direction.tiers
    ]


def _effective(policy: EffectivePolicy) -> dict[str, Any]:
    return {
        "ingress": _tiers(policy.ingress),
        "egress": _tiers(policy.egress),
        "profiles": list(dict.fromkeys([*policy.ingress.profiles, *policy.egress.profiles])),
    }


def _dscp(policy: DscpPolicy) -> str:
    return f"{policy.value} to {policy.destination or 'outside the cluster'}"


def _workload(wep: WorkloadEndpoint, snap: Snapshot) -> Record:
    oper = snap.oper.get(wep.key)
    effective = snap.state.effective.get(wep.key)
    return {
        "interface": wep.name,
        "state": wep.state,
        "oper": oper.value if oper is not None else "unknown",
        "addresses": [*wep.ipv4_nets, *wep.ipv6_nets],
        **(_effective(effective) if isinstance(effective, EffectivePolicy) else {}),
        **({"qos": describe(wep.qos)} if wep.qos else {}),
        **({"dscp": [_dscp(p) for p in wep.dscp]} if wep.dscp else {}),
    }


def _host_endpoint(hep: HostEndpoint, snap: Snapshot) -> Record:
    oper = snap.oper.get(hep.key)
    effective = snap.state.effective.get(hep.key)
    out: Record = {
        "interface": hep.name or "*",
        "oper": oper.value if oper is not None else "unknown",
        "addresses": [*hep.expected_ipv4_addrs, *hep.expected_ipv6_addrs],
    }
    if isinstance(effective, HostEffectivePolicy):
        out |= _effective(effective.normal)
        for point in ("untracked", "pre_dnat", "forward"):
            policy: EffectivePolicy = getattr(effective, point)
            out[point] = {"ingress": _tiers(policy.ingress), "egress": _tiers(policy.egress)}
    return out


def _policy(policy: Policy, _: Snapshot) -> Record:
    return {
        "tier": policy.tier,
        "inbound_rules": len(policy.inbound),
        "outbound_rules": len(policy.outbound),
        "untracked": policy.untracked,
        "pre_dnat": policy.pre_dnat,
    }


def _profile(profile: Profile, _: Snapshot) -> Record:
    return {"inbound_rules": len(profile.inbound), "outbound_rules": len(profile.outbound)}


def _ipset(ipset: IPSet, _: Snapshot) -> Record:
    return {"type": ipset.type.value, "size": len(ipset.members)}


def _service(service: Service, snap: Snapshot) -> Record:
    addresses = [*service.cluster_ips, *service.external_ips, *service.load_balancer_ips]
    frontends = [
        f"{_host_port(address, port.port)}/{port.protocol}"
        for address in addresses
        for port in service.ports
    ]
    frontends += [f"*:{p.node_port}/{p.protocol}" for p in service.ports if p.node_port]
    return {
        "type": service.type,
        "source": snap.services_source,
        "frontends": frontends,
        "endpoints": _endpoints(service),
    }


def _endpoints(service: Service) -> list[Record]:
    """Every endpoint the source gave, with the traffic it is chosen for, or why not.

    ``cluster`` is traffic under the Cluster policy (and topology hints);
    ``local`` is traffic under a Local policy, listed only when the service
    has one. The choice is the model's own (``Service.usable``), the one
    every platform programs.
    """
    cluster = set(service.usable(local_only=False))
    has_local = service.external_local or service.internal_local
    local = set(service.usable(local_only=True)) if has_local else set()
    out: list[Record] = []
    for b in service.backends:
        chosen = [u for u, pool in (("cluster", cluster), ("local", local)) if b in pool]
        why: list[str] = []
        if b not in cluster:
            why.append(_why_not(b, service))
        if has_local and b not in local and not b.local:
            why.append("other node (Local policy)")
        for p in b.ports:
            out.append(
                {
                    "endpoint": f"{_host_port(b.address, p.port)}/{p.protocol}",
                    "node": b.node_name,
                    "state": b.state.value,
                    "chosen": chosen,
                    "why_not": "; ".join(dict.fromkeys(why)) or None,
                }
            )
    out += [
        {"endpoint": a, "node": "", "state": "not ready", "chosen": [], "why_not": "not ready"}
        for a in service.not_ready
    ]
    return out


def _why_not(backend: Backend, service: Service) -> str:
    """Why ``backend`` carries no cluster-policy traffic (kube-proxy's order of tests)."""
    if backend.state is BackendState.QUARANTINED:
        return "quarantined (unhealthy)"
    if not backend.in_topology:
        return "topology hints send this node's traffic to other endpoints"
    if backend.state is BackendState.TERMINATING:
        return "terminating (ready endpoints serve)"
    return "not chosen"


def _host_port(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _route(route: Route, _: Snapshot) -> Record:
    return {
        "types": route.types.name.lower().replace("|", ",") if route.types.name else "cidr_info",
        "node": route.dst_node_name,
        "node_ip": route.dst_node_ip,
        "vxlan": route.tunnel.vxlan,
    }


def _vtep(vtep: Vtep, _: Snapshot) -> Record:
    return {
        family: {"address": v.address, "mac": v.mac, "parent": v.parent_address}
        for family, v in (("ipv4", vtep.v4), ("ipv6", vtep.v6))
        if v is not None
    }


def _host(host: Host, _: Snapshot) -> Record:
    return {"ipv4": host.ipv4, "ipv6": host.ipv6}


def _pool(pool: IPPool, _: Snapshot) -> Record:
    return {"cidr": pool.cidr, "masquerade": pool.masquerade}


def _objects(snap: Snapshot) -> dict[str, Mapping[str, Any]]:
    s = snap.state
    return {
        "workload_endpoint": {str(k): v for k, v in s.workload_endpoints.items()},
        "host_endpoint": {str(k): v for k, v in s.host_endpoints.items()},
        "policy": {str(k): v for k, v in s.policies.items()},
        "profile": s.profiles,
        "ipset": s.ipsets,
        "service": {str(k): v for k, v in s.services.items()},
        "route": s.routes,
        "vtep": s.vteps,
        "host": s.hosts,
        "ip_pool": s.ip_pools,
    }


_DETAIL: dict[str, Callable[[Any, Snapshot], Record]] = {
    "workload_endpoint": _workload,
    "host_endpoint": _host_endpoint,
    "policy": _policy,
    "profile": _profile,
    "ipset": _ipset,
    "service": _service,
    "route": _route,
    "vtep": _vtep,
    "host": _host,
    "ip_pool": _pool,
}


def _base(record: ObjectRecord) -> Record:
    return {
        "kind": record.kind,
        "id": record.id,
        "status": record.status,
        "since": rfc3339(record.since),
        "error": record.error,
    }


def state_document(snap: Snapshot) -> Record:
    """``/state`` and ``show --json``: the objects, and whether the node is in sync."""
    return {
        "taken_at": rfc3339(snap.taken_at),
        "in_sync": snap.in_sync,
        "waiting": snap.waiting or None,
        "objects": records(snap),
    }


def records(snap: Snapshot) -> list[Record]:
    """Every object of ``snap`` as a record, in :data:`KIND_ORDER`, then by id.

    An object the platform refused that no message names (an interface, one
    of our own chains) comes after the others, with no detail.
    """
    out: list[Record] = []
    for kind, objects in _objects(snap).items():
        detail = _DETAIL[kind]
        for ident in sorted(objects):
            record = snap.records.get((kind, ident))
            if record is None:  # tracked objects always have one; be safe
                record = ObjectRecord(kind, ident, "pending", snap.taken_at)
            out.append(_base(record) | detail(objects[ident], snap))
    known = set(KIND_ORDER)
    out += [_base(r) for key, r in sorted(snap.records.items()) if key[0] not in known]
    return out
