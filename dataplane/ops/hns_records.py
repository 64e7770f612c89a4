"""A simulated HNS host's file as ``show`` records: what HNS holds, object by object.

``show --hns FILE`` reads the file a driver run with ``--hns-fake FILE``
keeps (HCN V2 JSON, field names as hcsshim marshals them) and prints its
networks, endpoints and load balancers. These are HNS's own objects, as
programmed: each is ``done`` since the file was last written, and an
operator reads them beside the desired state (``show --log``) to see what
the driver made of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dataplane.ops.records import rfc3339
from dataplane.windows.sim.simhost_file import read_host_file

__all__ = ["hns_records"]

Json = dict[str, Any]

_PROTOCOLS = {6: "tcp", 17: "udp", 132: "sctp"}
_PROTOCOL_NAMES = {"6": "tcp", "17": "udp", "132": "sctp"}


def _policy_counts(policies: Iterable[Json]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for policy in policies:
        kind = str(policy.get("Type", "?"))
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


def _network(net: Json) -> Json:
    subnets = [
        s.get("IpAddressPrefix", "")
        for ipam in net.get("Ipams") or ()
        for s in ipam.get("Subnets") or ()
    ]
    return {"name": net.get("Name", ""), "type": net.get("Type", ""), "subnets": subnets}


def _endpoint(ep: Json, networks: dict[str, str]) -> Json:
    return {
        "name": ep.get("Name", ""),
        "network": networks.get(str(ep.get("HostComputeNetwork", "")).lower(), ""),
        "addresses": [c.get("IpAddress", "") for c in ep.get("IpConfigurations") or ()],
        # Flags bit 0: a remote endpoint (a pod on another node, kube-proxy's).
        "remote": bool(int(ep.get("Flags") or 0) & 1),
        "policies": _policy_counts(ep.get("Policies") or ()),
    }


def _protocol(value: object) -> str:
    if isinstance(value, int):
        return _PROTOCOLS.get(value, str(value))
    return _PROTOCOL_NAMES.get(str(value), str(value))


def _load_balancer(lb: Json) -> Json:
    vips = list(lb.get("FrontendVIPs") or ())
    frontends = [
        f"{vip or '*'}:{m.get('ExternalPort')}/{_protocol(m.get('Protocol'))}"
        for m in lb.get("PortMappings") or ()
        for vip in (vips or [""])
    ]
    return {
        "frontends": frontends,
        "backend_ports": sorted(
            {int(m.get("InternalPort") or 0) for m in lb.get("PortMappings") or ()}
        ),
        "endpoints": len(lb.get("HostComputeEndpoints") or ()),
    }


def hns_records(path: Path) -> list[Json]:
    """Every network, endpoint and load balancer in the host file at ``path``.

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not a host file.
    """
    data = read_host_file(path)  # under its lock: a driver may be rewriting it
    since = rfc3339(path.stat().st_mtime)

    def base(kind: str, obj: Json) -> Json:
        return {
            "kind": kind,
            "id": str(obj.get("ID", "")),
            "status": "done",
            "since": since,
            "error": None,
        }

    networks = {
        str(n.get("ID", "")).lower(): str(n.get("Name", "")) for n in data.get("Networks") or ()
    }
    out = [base("hns_network", n) | _network(n) for n in data.get("Networks") or ()]
    out += [base("hns_endpoint", e) | _endpoint(e, networks) for e in data.get("Endpoints") or ()]
    out += [
        base("hns_load_balancer", lb) | _load_balancer(lb) for lb in data.get("LoadBalancers") or ()
    ]
    return sorted(out, key=lambda r: (r["kind"], r.get("name", ""), r["id"]))
