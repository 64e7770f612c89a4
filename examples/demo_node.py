"""Builds ``examples/demo-node.log``: one node's worth of Felix messages.

The log is what Felix would send a node running six pods in three
namespaces with Kubernetes NetworkPolicies and a Calico security tier:

* namespaces ``frontend``, ``backend``, ``monitoring``, each with its
  namespace profile (``kns.<ns>``) and default service-account profile;
* selector IP sets (ids ``s:<hash>``, as Felix names them), a named-port
  set (``n:<hash>``, IP_AND_PORT) and a CIDR blocklist (NET);
* tier ``security``: a GlobalNetworkPolicy that denies the blocklist and
  passes the rest; tier ``default`` (default action Deny) with NetworkPolicies:
  web -> api on the named port ``http``, monitoring scrapes on 9090,
  DNS egress, ICMP echo, and a default deny for the database;
* one host endpoint; IPv4 and IPv6 addresses on every pod;
* InSync, then a scale-up of the web deployment after InSync.

Run ``python examples/demo_node.py`` to rewrite the log; a test checks
the committed file is what this script produces.
"""

from __future__ import annotations

import sys
from pathlib import Path

from google.protobuf.message import Message

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.msglog import write_log
from testbed.node import (
    PodSpec,
    allow_all_profile,
    felix_set_id,
    named_port_set,
    namespace_profiles,
    selector_set,
    workload_update,
)

LOG_PATH = Path(__file__).with_name("demo-node.log")

PODS = [
    PodSpec("web-1", "frontend", "web", 10),
    PodSpec("web-2", "frontend", "web", 11),
    PodSpec("api-1", "backend", "api", 20),
    PodSpec("api-2", "backend", "api", 21),
    PodSpec("db-1", "backend", "db", 30),
    PodSpec("prometheus-1", "monitoring", "prometheus", 40),
]
NAMESPACES = ["frontend", "backend", "monitoring"]
# The web deployment's scale-up, which arrives after InSync.
SCALE_UP = PodSpec("web-3", "frontend", "web", 12)

SEL_WEB = "projectcalico.org/namespace == 'frontend' && app == 'web'"
SEL_API = "projectcalico.org/namespace == 'backend' && app == 'api'"
SEL_MONITORING_NS = "projectcalico.org/namespace == 'monitoring'"
SEL_KUBE_DNS = "k8s-app == 'kube-dns'"
SET_WEB = selector_set(SEL_WEB)
SET_API = selector_set(SEL_API)
SET_MONITORING = selector_set(SEL_MONITORING_NS)
SET_DNS = selector_set(SEL_KUBE_DNS)
SET_API_HTTP = named_port_set(SEL_API, "http")
SET_BLOCKLIST = felix_set_id("s:", "global() && blocklist == 'true'")


def pod_ips(app: str) -> list[str]:
    return [a for p in PODS if p.app == app for a in (p.ipv4, p.ipv6)]


def _ports(*ports: int) -> list[pb.PortRange]:
    return [pb.PortRange(first=p, last=p) for p in ports]


def policy_id(name: str, namespace: str = "", kind: str = "NetworkPolicy") -> pb.PolicyID:
    return pb.PolicyID(name=name, namespace=namespace, kind=kind)


POL_BLOCKLIST = policy_id("security.deny-blocklist", kind="GlobalNetworkPolicy")
POL_WEB_TO_API = policy_id("knp.default.allow-web-to-api", "backend")
POL_MONITORING = policy_id("knp.default.allow-monitoring", "backend")
POL_DB_DENY = policy_id("knp.default.db-default-deny", "backend")
POL_FRONTEND_EGRESS = policy_id("knp.default.frontend-egress", "frontend")


def policies() -> list[Message]:
    tcp = pb.Protocol(name="tcp")
    return [
        pb.ActivePolicyUpdate(
            id=POL_BLOCKLIST,
            policy=pb.Policy(
                tier="security",
                inbound_rules=[
                    pb.Rule(action="deny", src_ip_set_ids=[SET_BLOCKLIST], rule_id="blk-in"),
                    pb.Rule(action="pass", rule_id="blk-pass"),
                ],
                outbound_rules=[
                    pb.Rule(action="deny", dst_ip_set_ids=[SET_BLOCKLIST], rule_id="blk-out"),
                    pb.Rule(action="pass", rule_id="blk-pass-out"),
                ],
            ),
        ),
        pb.ActivePolicyUpdate(
            id=POL_WEB_TO_API,
            policy=pb.Policy(
                tier="default",
                namespace="backend",
                inbound_rules=[
                    pb.Rule(
                        action="allow",
                        protocol=tcp,
                        src_ip_set_ids=[SET_WEB],
                        dst_named_port_ip_set_ids=[SET_API_HTTP],
                        rule_id="web-api",
                    ),
                    pb.Rule(
                        action="allow",
                        protocol=pb.Protocol(name="icmp"),
                        icmp_type=8,
                        src_ip_set_ids=[SET_WEB],
                        ip_version=pb.IPV4,
                        rule_id="web-ping",
                    ),
                ],
            ),
        ),
        pb.ActivePolicyUpdate(
            id=POL_MONITORING,
            policy=pb.Policy(
                tier="default",
                namespace="backend",
                inbound_rules=[
                    pb.Rule(
                        action="allow",
                        protocol=tcp,
                        src_ip_set_ids=[SET_MONITORING],
                        dst_ports=[pb.PortRange(first=9090, last=9091)],
                        rule_id="scrape",
                    )
                ],
            ),
        ),
        pb.ActivePolicyUpdate(
            id=POL_DB_DENY,
            policy=pb.Policy(tier="default", namespace="backend"),
        ),
        pb.ActivePolicyUpdate(
            id=POL_FRONTEND_EGRESS,
            policy=pb.Policy(
                tier="default",
                namespace="frontend",
                outbound_rules=[
                    pb.Rule(
                        action="allow",
                        protocol=pb.Protocol(number=17),
                        dst_ip_set_ids=[SET_DNS],
                        dst_ports=_ports(53),
                        rule_id="dns",
                    ),
                    pb.Rule(
                        action="allow",
                        protocol=tcp,
                        dst_ip_set_ids=[SET_API],
                        dst_named_port_ip_set_ids=[SET_API_HTTP],
                        rule_id="to-api",
                    ),
                    pb.Rule(
                        action="allow",
                        protocol=tcp,
                        not_dst_net=["10.0.0.0/8", "fd00::/8"],
                        dst_ports=_ports(443),
                        rule_id="internet-https",
                    ),
                ],
            ),
        ),
    ]


def _tiers(app: str) -> list[pb.TierInfo]:
    security = pb.TierInfo(
        name="security",
        ingress_policies=[POL_BLOCKLIST],
        egress_policies=[POL_BLOCKLIST],
        default_action="Deny",
    )
    ingress = {
        "api": [POL_WEB_TO_API, POL_MONITORING],
        "db": [POL_DB_DENY],
    }.get(app, [])
    egress = [POL_FRONTEND_EGRESS] if app == "web" else []
    if not ingress and not egress:
        return [security]
    default = pb.TierInfo(
        name="default",
        ingress_policies=ingress,
        egress_policies=egress,
        default_action="Deny",
    )
    return [security, default]


def workload(pod: PodSpec) -> pb.WorkloadEndpointUpdate:
    return workload_update(
        pod.workload_id,
        pod.iface,
        ipv4=[pod.ipv4],
        ipv6=[pod.ipv6],
        profiles=[f"kns.{pod.namespace}", f"ksa.{pod.namespace}.default"],
        tiers=_tiers(pod.app),
        mac=f"ee:ee:ee:ee:ee:{pod.index:02x}",
    )


def demo_messages() -> list[Message]:
    msgs: list[Message] = [
        pb.ConfigUpdate(
            config={
                "DatastoreType": "kubernetes",
                "FelixHostname": "node-1",
                "InterfacePrefix": "cali",
                "Ipv6Support": "true",
                "LogSeverityScreen": "Info",
                "ReportingIntervalSecs": "30",
                "ChainInsertMode": "insert",
                "DefaultEndpointToHostAction": "ACCEPT",
                "IptablesRefreshInterval": "90",
                "FailsafeInboundHostPorts": "tcp:22,udp:68,tcp:179,tcp:6443",
            }
        ),
        pb.HostMetadataUpdate(hostname="node-1", ipv4_addr="192.168.56.11"),
        pb.IPAMPoolUpdate(
            id="10.65.0.0-16", pool=pb.IPAMPool(cidr="10.65.0.0/16", masquerade=True)
        ),
        pb.IPAMPoolUpdate(id="fd00-10-65---48", pool=pb.IPAMPool(cidr="fd00:10:65::/48")),
    ]
    for ns in NAMESPACES:
        msgs.append(
            pb.NamespaceUpdate(
                id=pb.NamespaceID(name=ns), labels={"kubernetes.io/metadata.name": ns}
            )
        )
        msgs += namespace_profiles(ns)
    msgs += [
        pb.IPSetUpdate(id=SET_WEB, type=pb.IPSetUpdate.IP, members=pod_ips("web")),
        pb.IPSetUpdate(id=SET_API, type=pb.IPSetUpdate.IP, members=pod_ips("api")),
        pb.IPSetUpdate(id=SET_MONITORING, type=pb.IPSetUpdate.IP, members=pod_ips("prometheus")),
        pb.IPSetUpdate(id=SET_DNS, type=pb.IPSetUpdate.IP, members=["10.96.0.10"]),
        pb.IPSetUpdate(
            id=SET_API_HTTP,
            type=pb.IPSetUpdate.IP_AND_PORT,
            members=[f"{ip},tcp:8080" for ip in pod_ips("api")],
        ),
        pb.IPSetUpdate(
            id=SET_BLOCKLIST,
            type=pb.IPSetUpdate.NET,
            members=["203.0.113.0/24", "198.51.100.0/24", "2001:db8:bad::/48"],
        ),
    ]
    msgs += policies()
    for pod in PODS:
        msgs.append(workload(pod))
        msgs.append(
            pb.RouteUpdate(
                types=pb.LOCAL_WORKLOAD,
                dst=f"{pod.ipv4}/32",
                dst_node_name="node-1",
                local_workload=True,
            )
        )
    msgs.append(
        pb.HostEndpointUpdate(
            id=pb.HostEndpointID(endpoint_id="node-1-eth0"),
            endpoint=pb.HostEndpoint(
                name="eth0",
                profile_ids=["projectcalico-default-allow"],
                expected_ipv4_addrs=["192.168.56.11"],
            ),
        )
    )
    msgs.append(allow_all_profile("projectcalico-default-allow"))
    msgs.append(pb.InSync())
    # After InSync: the web deployment scales up by one pod.
    msgs.append(pb.IPSetDeltaUpdate(id=SET_WEB, added_members=[SCALE_UP.ipv4, SCALE_UP.ipv6]))
    msgs.append(workload(SCALE_UP))
    return msgs


def main() -> None:
    write_log(LOG_PATH, demo_messages())
    print(f"wrote {LOG_PATH}")


if __name__ == "__main__":
    main()
