"""A node's worth of Felix messages for the real-kernel policy tests.

Six pods in three namespaces, wired by testbed.topology; policies in
two tiers exercise allow/deny, single ports, a range, a named port, ICMP
type, negation, IP-set selectors, pass, profiles, both IP families.

Expected verdicts (ingress tier ``default`` defaults to Deny):

* ``security`` tier (both directions): deny the blocklist (web-2 is on it),
  deny TCP 6666 unless from prometheus (a negation), else pass.
* api pods: TCP from web on the named port ``http`` (8080); TCP 9090-9091
  from the monitoring namespace; ICMPv4 echo from web.
* db: TCP 5432 and UDP 5350-5360 from api.
* web egress: TCP to api on ``http``; UDP 53; ICMP anywhere.
* everyone else falls through to the allow-all namespace profiles.
"""

from __future__ import annotations

from google.protobuf.message import Message

from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.node import PodSpec, allow_all_profile, workload_endpoint_id, workload_update

NAMESPACES = ("frontend", "backend", "monitoring")

PODS = (
    PodSpec("web-1", "frontend", "web", 10),
    PodSpec("web-2", "frontend", "web", 11),
    PodSpec("api-1", "backend", "api", 20),
    PodSpec("api-2", "backend", "api", 21),
    PodSpec("db-1", "backend", "db", 30),
    PodSpec("prom-1", "monitoring", "prometheus", 40),
)

# Joins the node later in the update tests.
EXTRA = PodSpec("api-3", "backend", "api", 22)

SET_WEB, SET_API, SET_MON, SET_BLOCK, SET_HTTP = "s:web", "s:api", "s:mon", "s:block", "n:http"
TCP = pb.Protocol(name="tcp")


def pod(name: str) -> PodSpec:
    return next(p for p in (*PODS, EXTRA) if p.name == name)


def ips(*apps: str) -> list[str]:
    return [a for p in PODS if p.app in apps for a in (p.ipv4, p.ipv6)]


def pid(name: str, namespace: str = "") -> pb.PolicyID:
    return pb.PolicyID(name=name, namespace=namespace, kind="NetworkPolicy" if namespace else "")


def _ports(*ports: int) -> list[pb.PortRange]:
    return [pb.PortRange(first=p, last=p) for p in ports]


SECURITY = pid("security.guard")
WEB_TO_API = pid("allow-web-to-api", "backend")
MON_TO_API = pid("allow-monitoring", "backend")
API_TO_DB = pid("allow-api-to-db", "backend")
WEB_EGRESS = pid("web-egress", "frontend")


def policies() -> list[Message]:
    guard_rules = [
        pb.Rule(action="deny", src_ip_set_ids=[SET_BLOCK]),
        pb.Rule(
            action="deny",
            protocol=TCP,
            dst_ports=_ports(6666),
            not_src_ip_set_ids=[SET_MON],
        ),
        pb.Rule(action="pass"),
    ]
    return [
        pb.ActivePolicyUpdate(
            id=SECURITY,
            policy=pb.Policy(
                tier="security",
                inbound_rules=guard_rules,
                outbound_rules=[
                    pb.Rule(action="deny", dst_ip_set_ids=[SET_BLOCK]),
                    pb.Rule(action="pass"),
                ],
            ),
        ),
        pb.ActivePolicyUpdate(
            id=WEB_TO_API,
            policy=pb.Policy(
                tier="default",
                namespace="backend",
                inbound_rules=[
                    pb.Rule(
                        action="allow",
                        protocol=TCP,
                        src_ip_set_ids=[SET_WEB],
                        dst_named_port_ip_set_ids=[SET_HTTP],
                    ),
                    pb.Rule(
                        action="allow",
                        ip_version=pb.IPV4,
                        protocol=pb.Protocol(name="icmp"),
                        icmp_type=8,
                        src_ip_set_ids=[SET_WEB],
                    ),
                ],
            ),
        ),
        pb.ActivePolicyUpdate(
            id=MON_TO_API,
            policy=pb.Policy(
                tier="default",
                namespace="backend",
                inbound_rules=[
                    pb.Rule(
                        action="allow",
                        protocol=TCP,
                        src_ip_set_ids=[SET_MON],
                        dst_ports=[pb.PortRange(first=9090, last=9091)],
                    )
                ],
            ),
        ),
        pb.ActivePolicyUpdate(
            id=API_TO_DB,
            policy=pb.Policy(
                tier="default",
                namespace="backend",
                inbound_rules=[
                    pb.Rule(
                        action="allow",
                        protocol=TCP,
                        src_ip_set_ids=[SET_API],
                        dst_ports=_ports(5432),
                    ),
                    pb.Rule(
                        action="allow",
                        protocol=pb.Protocol(number=17),
                        src_ip_set_ids=[SET_API],
                        dst_ports=[pb.PortRange(first=5350, last=5360)],
                    ),
                ],
            ),
        ),
        pb.ActivePolicyUpdate(
            id=WEB_EGRESS,
            policy=pb.Policy(
                tier="default",
                namespace="frontend",
                outbound_rules=[
                    pb.Rule(
                        action="allow",
                        protocol=TCP,
                        dst_ip_set_ids=[SET_API],
                        dst_named_port_ip_set_ids=[SET_HTTP],
                    ),
                    pb.Rule(action="allow", protocol=pb.Protocol(name="udp"), dst_ports=_ports(53)),
                    pb.Rule(action="allow", protocol=pb.Protocol(name="icmp")),
                    pb.Rule(action="allow", protocol=pb.Protocol(name="icmpv6")),
                ],
            ),
        ),
    ]


def tiers(app: str) -> list[pb.TierInfo]:
    security = pb.TierInfo(name="security", ingress_policies=[SECURITY], egress_policies=[SECURITY])
    ingress = {"api": [WEB_TO_API, MON_TO_API], "db": [API_TO_DB]}.get(app, [])
    egress = [WEB_EGRESS] if app == "web" else []
    default = pb.TierInfo(
        name="default", ingress_policies=ingress, egress_policies=egress, default_action="Deny"
    )
    return [security, default]


def endpoint(
    spec: PodSpec, iface: str, state: str = "active", *, policies: bool = True
) -> pb.WorkloadEndpointUpdate:
    return workload_update(
        spec.workload_id,
        iface,
        ipv4=[spec.ipv4],
        ipv6=[spec.ipv6],
        profiles=[f"kns.{spec.namespace}"],
        tiers=tiers(spec.app) if policies else [],
        state=state,
    )


def endpoint_id(spec: PodSpec) -> pb.WorkloadEndpointID:
    return workload_endpoint_id(spec.workload_id)


# What a Felix left at its defaults sends for the keys that shape the
# dataplane. Every kernel test runs under these unless it is about a setting
# (then it overrides that one key): a test that quietly loosens a default
# (DefaultEndpointToHostAction=ACCEPT did) hides what a real node does.
FELIX_DEFAULTS = {
    "InterfacePrefix": "cali",
    "Ipv6Support": "true",
    "DefaultEndpointToHostAction": "DROP",
    "ChainInsertMode": "insert",
    "IptablesMarkMask": "0xffff0000",
    "IptablesFilterAllowAction": "ACCEPT",
    "IptablesFilterDenyAction": "DROP",
    "ReportingIntervalSecs": "30",
}


def config(**overrides: str) -> pb.ConfigUpdate:
    return pb.ConfigUpdate(config={**FELIX_DEFAULTS, **overrides})


def node_messages(
    ifaces: dict[str, str],
    *,
    with_policies: bool = True,
    extra: list[Message] | None = None,
    **config_overrides: str,
) -> list[Message]:
    """Everything up to and including InSync, for pods with these interfaces.

    Without ``with_policies`` the pods have only their allow-all profiles;
    ``extra`` messages go in just before InSync.
    """
    msgs: list[Message] = [
        config(**config_overrides),
        pb.IPAMPoolUpdate(id="pool-v4", pool=pb.IPAMPool(cidr="10.65.0.0/16", masquerade=True)),
        pb.IPAMPoolUpdate(id="pool-v6", pool=pb.IPAMPool(cidr="fd00:10:65::/48")),
        pb.IPSetUpdate(id=SET_WEB, members=ips("web")),
        pb.IPSetUpdate(id=SET_API, members=ips("api")),
        pb.IPSetUpdate(id=SET_MON, members=ips("prometheus")),
        pb.IPSetUpdate(
            id=SET_BLOCK,
            type=pb.IPSetUpdate.NET,
            members=[f"{pod('web-2').ipv4}/32", f"{pod('web-2').ipv6}/128", "203.0.113.0/24"],
        ),
        pb.IPSetUpdate(
            id=SET_HTTP,
            type=pb.IPSetUpdate.IP_AND_PORT,
            members=[f"{ip},tcp:8080" for ip in ips("api")],
        ),
    ]
    msgs += [allow_all_profile(f"kns.{ns}") for ns in NAMESPACES]
    msgs += policies()
    msgs += [
        endpoint(spec, ifaces[spec.name], policies=with_policies)
        for spec in PODS
        if spec.name in ifaces
    ]
    msgs += extra or []
    msgs.append(pb.InSync())
    return msgs
