"""Builds ``examples/services-node.log``: a node with services and VXLAN neighbours.

What ``node-1`` of a three-node VXLAN cluster hears, so that ``show`` and
``explain`` to a service VIP can be tried without a cluster:

* VXLAN (pool ``vxlanMode: Always``) with ``node-2`` and ``node-3``: their
  VTEPs, hosts and blocks as Felix's calculation graph sends them (the
  same builder as the overlay kernel tests);
* four pods on this node (``web-1`` in ``frontend``; ``api-1``, ``api-2``
  and ``db-1`` in ``backend``), allow-all profiles;
* services, with backends as this driver's ``ServiceBackendsUpdate``
  carries them when services come from messages (replay, embedding):
  ``backend/api``, a ClusterIP on port 80 to ``api-1``, ``api-2`` and a
  pod on ``node-2``; ``backend/api-public``, a NodePort (30080) with
  ``externalTrafficPolicy: Local``, the same endpoints; ``backend/db``,
  a ClusterIP whose only endpoint is terminating;
* InSync.

Run ``python examples/services_node.py`` to rewrite the log; a test checks
the committed file is what this script produces. Try::

    dataplane-driver show --log examples/services-node.log --kind service
    dataplane-driver explain --log examples/services-node.log \\
        --from 10.65.1.10 --to 10.96.0.20 --proto tcp --port 80
"""

from __future__ import annotations

import sys
from pathlib import Path

from google.protobuf.message import Message

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.msglog import write_log
from testbed.node import allow_all_profile, workload_update
from tests.kernel.overlay_messages import cluster_messages, overlay_config, overlay_node

LOG_PATH = Path(__file__).with_name("services-node.log")

NODES = [
    overlay_node("node-1", 1, "192.168.56.11/24", "fd00:56::11/64"),
    overlay_node("node-2", 2, "192.168.56.12/24", "fd00:56::12/64"),
    overlay_node("node-3", 3, "192.168.57.13/24", "fd00:57::13/64"),
]
LOCAL = NODES[0]
# (name, namespace, address number in node-1's block)
PODS = [("web-1", "frontend", 10), ("api-1", "backend", 20), ("api-2", "backend", 21)]
PODS += [("db-1", "backend", 30)]
REMOTE_API = NODES[1].pod_address(4, 20)  # an api pod on node-2

API_VIP, DB_VIP = "10.96.0.20", "10.96.0.30"
HTTP = pb.ServiceBackendPort(name="http", protocol="TCP", port=8080)
PROFILE = "kns.allow-all"


def _address(number: int) -> str:
    return LOCAL.pod_address(4, number)


def _backend(address: str, *, local: bool, state: int = pb.BACKEND_ACTIVE) -> pb.ServiceBackend:
    return pb.ServiceBackend(
        addresses=[address],
        ports=[HTTP],
        local=local,
        state=state,  # type: ignore[arg-type]
        node_name=LOCAL.name if local else NODES[1].name,
    )


def _services() -> list[Message]:
    api_backends = [
        _backend(_address(20), local=True),
        _backend(_address(21), local=True),
        _backend(REMOTE_API, local=False),
    ]
    http = [pb.ServicePort(Protocol="TCP", Port=80, name="http")]
    return [
        pb.ServiceUpdate(
            name="api", namespace="backend", type="ClusterIP", cluster_ips=[API_VIP], ports=http
        ),
        pb.ServiceBackendsUpdate(name="api", namespace="backend", backends=api_backends),
        pb.ServiceUpdate(
            name="api-public",
            namespace="backend",
            type="NodePort",
            cluster_ips=["10.96.0.21"],
            ports=[pb.ServicePort(Protocol="TCP", Port=80, NodePort=30080, name="http")],
            external_traffic_policy="Local",
        ),
        pb.ServiceBackendsUpdate(name="api-public", namespace="backend", backends=api_backends),
        pb.ServiceUpdate(
            name="db", namespace="backend", type="ClusterIP", cluster_ips=[DB_VIP], ports=http
        ),
        pb.ServiceBackendsUpdate(
            name="db",
            namespace="backend",
            backends=[_backend(_address(30), local=True, state=pb.BACKEND_TERMINATING)],
        ),
    ]


def services_messages() -> list[Message]:
    msgs: list[Message] = [
        pb.ConfigUpdate(config=overlay_config(LOCAL.name)),
        allow_all_profile(PROFILE),
    ]
    local_pods = [_address(number) for _name, _ns, number in PODS]
    msgs += cluster_messages(NODES, LOCAL.name, "Always", local_pods=local_pods)
    for name, namespace, number in PODS:
        msgs.append(
            workload_update(
                f"{namespace}/{name}",
                f"cali{number:02d}{name.replace('-', '')}"[:15],
                ipv4=[_address(number)],
                profiles=[PROFILE],
            )
        )
    msgs += _services()
    msgs.append(pb.InSync())
    return msgs


def main() -> None:
    write_log(LOG_PATH, services_messages())
    print(f"wrote {LOG_PATH}")


if __name__ == "__main__":
    main()
