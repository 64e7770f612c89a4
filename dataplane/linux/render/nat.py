"""NAT-table renderer: outgoing masquerade for IP pools, floating IPs.

Pure. Pod traffic leaving the IP pools from a pool with ``masquerade`` set
is masqueraded behind the node's address; traffic between pool addresses
never is. Floating IPs (``ipv4_nat``/``ipv6_nat`` on an endpoint) DNAT the
external address to the pod on the way in, and SNAT a pod's reply that
hairpins back to itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dataplane.linux.iptables.chains import Chain, IptRule
from dataplane.linux.iptables.marks import has_mark
from dataplane.linux.render.chain_names import ChainNames
from dataplane.model import NatInfo

__all__ = ["ALL_POOLS_SET", "MASQ_POOLS_SET", "NatRenderer"]

# Internal IP set ids (not Felix's): the platform maintains them from
# IPAMPoolUpdate messages. Felix's own names are all-ipam-pools/masq-ipam-pools.
ALL_POOLS_SET = "all-ipam-pools"
MASQ_POOLS_SET = "masq-ipam-pools"


@dataclass(frozen=True, slots=True)
class NatRenderer:
    version: int
    names: ChainNames
    all_pools_set: str  # kernel names, for this IP version
    masq_pools_set: str
    masq_mark: int
    nat_port_range: tuple[int, int] | None = None
    # This version's VXLAN device, when it has a tunnel address.
    tunnel: str = ""
    # Kernel name of all-hosts-net when NAT-outgoing spares node addresses
    # (NATOutgoingExclusions=IPPoolsAndHostIPs).
    all_hosts_set: str = ""

    def chains(self, floating: Iterable[NatInfo]) -> list[Chain]:
        n = self.names
        fips = sorted(
            (f for f in floating if (":" in f.ext_ip) == (self.version == 6)),
            key=lambda f: (f.ext_ip, f.int_ip),
        )
        dnat = tuple(
            IptRule(f"-d {f.ext_ip}", f"-j DNAT --to-destination {f.int_ip}") for f in fips
        )
        snat = tuple(
            IptRule(f"-s {f.int_ip} -d {f.int_ip}", f"-j SNAT --to-source {f.ext_ip}") for f in fips
        )
        hosts = f" -m set ! --match-set {self.all_hosts_set} dst" if self.all_hosts_set else ""
        outgoing = self._masquerade(
            f"-m set --match-set {self.masq_pools_set} src"
            f" -m set ! --match-set {self.all_pools_set} dst{hosts}"
        )
        services = IptRule("", f"-j {n.top('SERVICES')}")
        masq = has_mark(self.masq_mark)
        return [
            Chain(n.top("PREROUTING"), (IptRule("", f"-j {n.top('fip-dnat')}"), services)),
            Chain(n.top("OUTPUT"), (IptRule("", f"-j {n.top('fip-dnat')}"), services)),
            Chain(
                n.top("POSTROUTING"),
                (
                    IptRule("", f"-j {n.top('fip-snat')}"),
                    # Service traffic marked for it (hairpin, off-node
                    # backends, external Cluster-policy traffic).
                    *self._masquerade(masq),
                    *self._tunnel_source(),
                    IptRule("", f"-j {n.top('nat-outgoing')}"),
                ),
            ),
            Chain(n.top("fip-dnat"), dnat),
            Chain(n.top("fip-snat"), snat),
            Chain(n.top("nat-outgoing"), outgoing),
        ]

    def _tunnel_source(self) -> tuple[IptRule, ...]:
        """Host traffic into the tunnel from a host address other than the
        tunnel's own (a socket bound to the wrong address, a service IP the
        kernel NATed after picking the source) takes the tunnel address, or
        replies could not find their way back; as Felix does."""
        if not self.tunnel:
            return ()
        match = (
            f"-o {self.tunnel} -m addrtype ! --src-type LOCAL --limit-iface-out"
            " -m addrtype --src-type LOCAL"
        )
        return self._masquerade(match)

    def _masquerade(self, match: str) -> tuple[IptRule, ...]:
        """MASQUERADE what ``match`` selects, within ``NATPortRange`` if set.

        The kernel takes ``--to-ports`` only with ``-p tcp|udp|sctp|...``
        (a port range means nothing to ICMP), so with a range there is one
        rule for TCP and UDP and a last one, without ports, for the rest
        -- as Felix writes it.
        """
        if not self.nat_port_range:
            return (IptRule(match, "-j MASQUERADE"),)
        lo, hi = self.nat_port_range
        ports = f"--to-ports {lo}-{hi}" if lo != hi else f"--to-ports {lo}"
        return (
            *(
                IptRule(f"-p {proto} {match}".strip(), f"-j MASQUERADE {ports}")
                for proto in ("tcp", "udp")
            ),
            IptRule(match, "-j MASQUERADE"),
        )

    def hooks(self) -> Mapping[str, tuple[IptRule, ...]]:
        n = self.names
        return {
            builtin: (IptRule("", f"-j {n.top(builtin)}"),)
            for builtin in ("PREROUTING", "OUTPUT", "POSTROUTING")
        }
