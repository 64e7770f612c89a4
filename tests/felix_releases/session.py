"""One realistic node session in master's terms, for every release to say.

The kernel policy scenario (tests/kernel/scenario.py: six pods, selector
and named-port IP sets, a security tier with pass, namespaced policies,
profiles) with what a v3.32+ Felix always fills in (every policy's kind),
plus what differs between releases:

* a ``platform`` tier first, default action Pass, whose one policy matches
  nothing the pods send: were Pass read as Deny, every probe would fail;
* a ``staging`` tier of a staged global policy that denies everything: a
  tier of staged policies alone has no end-of-tier drop;
* a staged namespaced deny-all ahead of api's ingress policies, never
  enforced;
* a Kubernetes NetworkPolicy letting prometheus reach db on TCP 80 (the
  ``knp.default.`` name up to v3.31);
* a host endpoint with normal, untracked, pre-DNAT and forward tiers;
* host metadata for this node and another, a ClusterIP service with
  backends and, with ``overlay``, VXLAN routes and a VTEP;
* after InSync: the other node and the host endpoint's policies go away.
"""

from __future__ import annotations

from google.protobuf.message import Message

from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.msgs import to_dataplane
from tests.kernel import scenario
from tests.kernel.services import backend_set, service

__all__ = ["NODE", "after_sync", "master_session"]

NODE = "node-a"
_GLOBAL = "GlobalNetworkPolicy"
PLATFORM = pb.PolicyID(name="platform.audit", kind=_GLOBAL)
LOCKDOWN_ALL = pb.PolicyID(name="staging.lockdown", kind="StagedGlobalNetworkPolicy")
API_LOCKDOWN = pb.PolicyID(name="lockdown", namespace="backend", kind="StagedNetworkPolicy")
PROM_PROBE = pb.PolicyID(
    name="allow-prom-probe", namespace="backend", kind="KubernetesNetworkPolicy"
)
HOST_NORMAL = pb.PolicyID(name="host.ssh", kind=_GLOBAL)
HOST_UNTRACKED = pb.PolicyID(name="host.untracked", kind=_GLOBAL)
HOST_PRE_DNAT = pb.PolicyID(name="host.pre-dnat", kind=_GLOBAL)
_DENY_ALL = [pb.Rule(action="deny")]


def _kinded(policy_id: pb.PolicyID) -> None:
    """Every v3.32+ Felix names the kind; the scenario leaves it off globals."""
    if not policy_id.kind:
        policy_id.kind = _GLOBAL if not policy_id.namespace else "NetworkPolicy"


def _policies() -> list[Message]:
    def update(pid: pb.PolicyID, tier: str, **fields: object) -> pb.ActivePolicyUpdate:
        policy = pb.Policy(tier=tier, namespace=pid.namespace, **fields)  # type: ignore[arg-type]
        return pb.ActivePolicyUpdate(id=pid, policy=policy)

    audit = [pb.Rule(action="deny", src_net=["198.51.100.0/24"])]
    probe = [
        pb.Rule(
            action="allow",
            protocol=pb.Protocol(name="tcp"),
            src_ip_set_ids=[scenario.SET_MON],
            dst_ports=[pb.PortRange(first=80, last=80)],
        )
    ]
    tcp = pb.Protocol(name="tcp")
    ssh = [pb.Rule(action="allow", protocol=tcp, dst_ports=[pb.PortRange(first=22, last=22)])]
    return [
        update(PLATFORM, "platform", inbound_rules=audit, outbound_rules=audit),
        update(LOCKDOWN_ALL, "staging", inbound_rules=_DENY_ALL, outbound_rules=_DENY_ALL),
        update(API_LOCKDOWN, "default", inbound_rules=_DENY_ALL),
        update(PROM_PROBE, "default", inbound_rules=probe),
        update(HOST_NORMAL, "default", inbound_rules=ssh),
        update(HOST_UNTRACKED, "default", inbound_rules=ssh, untracked=True),
        update(HOST_PRE_DNAT, "default", inbound_rules=audit, pre_dnat=True),
    ]


def _endpoint_tiers(update: pb.WorkloadEndpointUpdate, app: str) -> None:
    tiers = update.endpoint.tiers
    for tier in tiers:
        for pid in (*tier.ingress_policies, *tier.egress_policies):
            _kinded(pid)
        if tier.name == "default" and app == "api":
            tier.ingress_policies.insert(0, API_LOCKDOWN)
        if tier.name == "default" and app == "db":
            tier.ingress_policies.append(PROM_PROBE)
    first = [
        pb.TierInfo(
            name="platform",
            ingress_policies=[PLATFORM],
            egress_policies=[PLATFORM],
            default_action="Pass",
        ),
        pb.TierInfo(
            name="staging",
            ingress_policies=[LOCKDOWN_ALL],
            egress_policies=[LOCKDOWN_ALL],
            default_action="Deny",
        ),
    ]
    for i, tier in enumerate(first):
        tiers.insert(i, tier)


def _host_endpoint() -> pb.HostEndpointUpdate:
    def tier(*pids: pb.PolicyID) -> pb.TierInfo:
        return pb.TierInfo(name="default", ingress_policies=list(pids), default_action="Deny")

    return pb.HostEndpointUpdate(
        id=pb.HostEndpointID(endpoint_id=f"{NODE}-hep0"),
        endpoint=pb.HostEndpoint(
            name="hep0",
            profile_ids=["kns.frontend"],
            tiers=[tier(HOST_NORMAL)],
            untracked_tiers=[tier(HOST_UNTRACKED)],
            pre_dnat_tiers=[tier(HOST_PRE_DNAT)],
            forward_tiers=[tier(HOST_NORMAL)],
            expected_ipv4_addrs=["192.0.2.10"],
        ),
    )


def _hosts() -> list[Message]:
    return [
        pb.HostMetadataUpdate(
            hostname=NODE,
            ipv4_addr="192.0.2.10/24",
            ipv6_addr="fd00:192::10/64",
            asnumber="64512",
            labels={"topology.kubernetes.io/zone": "a"},
        ),
        pb.HostMetadataUpdate(
            hostname="node-b", ipv4_addr="192.0.2.11/24", labels={"kubernetes.io/os": "linux"}
        ),
    ]


def _overlay() -> list[Message]:
    return [
        pb.Encapsulation(vxlan_enabled=True),
        pb.VXLANTunnelEndpointUpdate(
            node="node-b",
            mac="66:1a:2b:3c:4d:5e",
            ipv4_addr="10.65.1.0",
            parent_device_ip="192.0.2.11",
        ),
        pb.RouteUpdate(
            types=pb.REMOTE_WORKLOAD,
            ip_pool_type=pb.VXLAN,
            dst="10.65.1.0/26",
            dst_node_name="node-b",
            dst_node_ip="192.0.2.11",
        ),
        pb.RouteUpdate(types=pb.REMOTE_HOST, dst="192.0.2.11/32", dst_node_name="node-b"),
    ]


def _service() -> list[Message]:
    api = [p for p in scenario.PODS if p.app == "api"]
    http = [pb.ServiceBackendPort(name="http", protocol="TCP", port=8080)]
    return [
        service("api"),
        backend_set("api", [((p.ipv4, p.ipv6), True) for p in api], http),
    ]


def master_session(ifaces: dict[str, str], *, overlay: bool = False) -> list[pb.ToDataplane]:
    """Everything up to and including InSync, numbered as Felix numbers it."""
    extra = [*_policies(), _host_endpoint(), *_hosts(), *_service()]
    if overlay:
        extra += _overlay()
    msgs = scenario.node_messages(ifaces, extra=extra)
    for msg in msgs:
        if isinstance(msg, pb.ActivePolicyUpdate):
            _kinded(msg.id)
        elif isinstance(msg, pb.WorkloadEndpointUpdate):
            app = next(p.app for p in scenario.PODS if p.workload_id == msg.id.workload_id)
            _endpoint_tiers(msg, app)
    return [to_dataplane(msg, seq) for seq, msg in enumerate(msgs, start=1)]


def after_sync(first_seq: int) -> list[pb.ToDataplane]:
    """Churn after InSync: a node leaves, the host endpoint and its policies go."""
    msgs: list[Message] = [
        pb.HostMetadataRemove(hostname="node-b"),
        pb.HostEndpointRemove(id=pb.HostEndpointID(endpoint_id=f"{NODE}-hep0")),
        pb.ActivePolicyRemove(id=HOST_UNTRACKED),
        pb.ActivePolicyRemove(id=HOST_PRE_DNAT),
    ]
    return [to_dataplane(msg, seq) for seq, msg in enumerate(msgs, start=first_seq)]
