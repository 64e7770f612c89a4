"""Filter rules the overlay adds: VXLAN only between nodes, no encapsulation from pods.

Pure, for one IP version. As Felix writes them:

- INPUT: VXLAN to a local address is accepted from the other nodes'
  tunnel parents (``all-vxlan-net``) and dropped from anywhere else, so no
  one off the cluster can inject packets into the overlay;
- OUTPUT: VXLAN to the other nodes is accepted before host endpoint
  policy, which could otherwise cut the overlay by accident;
- a pod's egress: VXLAN and IPIP packets are dropped before its policy,
  as the encapsulation could carry traffic past that policy, unless
  ``AllowVXLANPacketsFromWorkloads``/``AllowIPIPPacketsFromWorkloads``.
"""

from __future__ import annotations

from dataplane.config import Config
from dataplane.linux.netlink.overlay_plan import vxlan_enabled
from dataplane.linux.rules.action import named_verdict
from dataplane.linux.rules.match import InSet, LocalAddress, Port, Protocol, Side
from dataplane.linux.rules.rule import TableRule

__all__ = ["encap_drops", "vxlan_host_rules"]


def encap_drops(config: Config) -> list[TableRule]:
    """The start of every pod's egress chain."""
    deny = named_verdict(config.iptables_filter_deny_action)
    out = []
    if not config.allow_vxlan_packets_from_workloads:
        out.append(
            TableRule(
                (Protocol("udp"), Port(Side.DST, config.vxlan_port)),
                deny,
                comment="VXLAN encapsulated packets from workloads",
            )
        )
    if not config.allow_ipip_packets_from_workloads:
        out.append(
            TableRule((Protocol("4"),), deny, comment="IPIP encapsulated packets from workloads")
        )
    return out


def vxlan_host_rules(
    config: Config, version: int, nodes: str | None, *, inbound: bool
) -> list[TableRule]:
    """INPUT (``inbound``) or OUTPUT rules; ``nodes``: the kernel name of all-vxlan-net."""
    if not vxlan_enabled(config, version):
        return []
    vxlan = (Protocol("udp"), Port(Side.DST, config.vxlan_port))
    allow = named_verdict(config.iptables_filter_allow_action)
    if not inbound:
        if nodes is None:
            return []
        to_nodes = (*vxlan, LocalAddress(Side.SRC), InSet(Side.DST, nodes))
        return [TableRule(to_nodes, allow, comment="VXLAN to other nodes")]
    local = (*vxlan, LocalAddress(Side.DST))
    out = []
    if nodes is not None:
        out.append(
            TableRule((*local, InSet(Side.SRC, nodes)), allow, comment="VXLAN from other nodes")
        )
    deny = named_verdict(config.iptables_filter_deny_action)
    out.append(TableRule(local, deny, comment="VXLAN from anywhere else"))
    return out
