"""Service messages and probes shared by the kernel service tests.

Services are built as Felix's ``ServiceUpdate`` with this driver's
extensions; backends as ``ServiceBackendsUpdate``, one ``ServiceBackend``
per pod with an address per family (as an EndpointSlice endpoint). Every
test server answers with its namespace's name, so :func:`served_by` tells
which backend served a connection.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence

from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.topology import Namespace, Proto

__all__ = ["HTTP", "VIP4", "VIP6", "backend_set", "served_by", "service"]

VIP4, VIP6 = "10.96.0.10", "fd00:96::10"
HTTP = [pb.ServicePort(Protocol="TCP", Port=80, name="http")]


def service(name: str = "web", **kwargs: object) -> pb.ServiceUpdate:
    """A ClusterIP service in namespace ``prod`` on :data:`VIP4`/:data:`VIP6`,
    port 80 named ``http``; ``kwargs`` override any field."""
    base: dict[str, object] = {
        "name": name,
        "namespace": "prod",
        "type": "ClusterIP",
        "cluster_ips": [VIP4, VIP6],
        "ports": HTTP,
    }
    base.update(kwargs)
    return pb.ServiceUpdate(**base)  # type: ignore[arg-type]


def backend_set(
    name: str,
    members: Iterable[tuple[Sequence[str], bool]],
    ports: Sequence[pb.ServiceBackendPort],
    state: int = pb.BACKEND_ACTIVE,
) -> pb.ServiceBackendsUpdate:
    """Service ``name``'s backends: one per (addresses, on this node) member."""
    return pb.ServiceBackendsUpdate(
        name=name,
        namespace="prod",
        backends=[
            pb.ServiceBackend(
                addresses=addresses,
                ports=ports,
                local=local,
                state=state,  # type: ignore[arg-type]
            )
            for addresses, local in members
        ],
    )


def served_by(
    src: Namespace, dst: str, port: int, count: int, proto: Proto = "tcp"
) -> collections.Counter[str]:
    """Which backend answered each of ``count`` fresh connections (or datagrams)."""
    seen: collections.Counter[str] = collections.Counter()
    for _ in range(count):
        result = src.connect(proto, dst, port, timeout=3)
        seen[result.reply if result.ok and result.reply else f"failed:{result.error}"] += 1
    return seen
