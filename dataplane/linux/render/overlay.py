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
from dataplane.linux.iptables.chains import IptRule
from dataplane.linux.netlink.overlay_plan import vxlan_enabled

__all__ = ["encap_drops", "vxlan_host_rules"]


def encap_drops(config: Config) -> list[IptRule]:
    """The start of every pod's egress chain."""
    deny = f"-j {config.iptables_filter_deny_action}"
    out = []
    if not config.allow_vxlan_packets_from_workloads:
        out.append(
            IptRule(
                f"-p udp --dport {config.vxlan_port}",
                deny,
                comment="VXLAN encapsulated packets from workloads",
            )
        )
    if not config.allow_ipip_packets_from_workloads:
        out.append(IptRule("-p 4", deny, comment="IPIP encapsulated packets from workloads"))
    return out


def vxlan_host_rules(
    config: Config, version: int, nodes: str | None, *, inbound: bool
) -> list[IptRule]:
    """INPUT (``inbound``) or OUTPUT rules; ``nodes``: the kernel name of all-vxlan-net."""
    if not vxlan_enabled(config, version):
        return []
    port = config.vxlan_port
    allow = f"-j {config.iptables_filter_allow_action}"
    if not inbound:
        if nodes is None:
            return []
        match = f"-p udp --dport {port} -m addrtype --src-type LOCAL -m set --match-set {nodes} dst"
        return [IptRule(match, allow, comment="VXLAN to other nodes")]
    local = f"-p udp --dport {port} -m addrtype --dst-type LOCAL"
    out = []
    if nodes is not None:
        out.append(
            IptRule(
                f"{local} -m set --match-set {nodes} src", allow, comment="VXLAN from other nodes"
            )
        )
    deny = f"-j {config.iptables_filter_deny_action}"
    out.append(IptRule(local, deny, comment="VXLAN from anywhere else"))
    return out
