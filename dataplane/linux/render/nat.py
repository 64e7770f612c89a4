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
from typing import Generic, TypeVar

from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.rules.action import Dnat, Jump, Masquerade, Snat
from dataplane.linux.rules.chain import Chain, Serialiser
from dataplane.linux.rules.match import (
    Addresses,
    InSet,
    Interface,
    LocalAddress,
    MarkMatch,
    Match,
    Protocol,
    Side,
)
from dataplane.linux.rules.rule import TableRule
from dataplane.model import NatInfo

__all__ = ["ALL_POOLS_SET", "MASQ_POOLS_SET", "NatRenderer"]

# Internal IP set ids (not Felix's): the platform maintains them from
# IPAMPoolUpdate messages. Felix's own names are all-ipam-pools/masq-ipam-pools.
ALL_POOLS_SET = "all-ipam-pools"
MASQ_POOLS_SET = "masq-ipam-pools"


R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class NatRenderer(Generic[R]):
    """The nat table for one IP version, in the syntax ``out`` spells."""

    version: int
    names: ChainNames
    out: Serialiser[R]
    all_pools_set: str  # kernel names, for this IP version
    masq_pools_set: str
    masq_mark: int
    nat_port_range: tuple[int, int] | None = None
    # This version's VXLAN device, when it has a tunnel address.
    tunnel: str = ""
    # Kernel name of all-hosts-net when NAT-outgoing spares node addresses
    # (NATOutgoingExclusions=IPPoolsAndHostIPs).
    all_hosts_set: str = ""
    # NATOutgoingAddress (IPv4 only, as Felix): NAT outgoing SNATs to it
    # instead of masquerading to the outgoing interface's address.
    outgoing_address: str = ""
    # IptablesNATOutgoingInterfaceFilter: NAT outgoing only by this interface.
    outgoing_interface: str = ""

    def _chain(self, name: str, rules: Iterable[TableRule]) -> Chain[R]:
        return Chain(name, self.out.rules(rules))

    def chains(self, floating: Iterable[NatInfo]) -> list[Chain[R]]:
        n = self.names
        fips = sorted(
            (f for f in floating if (":" in f.ext_ip) == (self.version == 6)),
            key=lambda f: (f.ext_ip, f.int_ip),
        )
        dnat = [TableRule((Addresses(Side.DST, (f.ext_ip,)),), Dnat(f.int_ip)) for f in fips]
        snat = [
            TableRule(
                (Addresses(Side.SRC, (f.int_ip,)), Addresses(Side.DST, (f.int_ip,))), Snat(f.ext_ip)
            )
            for f in fips
        ]
        leaving: list[Match] = [
            InSet(Side.SRC, self.masq_pools_set),
            InSet(Side.DST, self.all_pools_set, negate=True),
        ]
        if self.all_hosts_set:
            leaving.append(InSet(Side.DST, self.all_hosts_set, negate=True))
        if self.outgoing_interface:
            leaving.append(Interface(self.outgoing_interface, inbound=False))
        services = TableRule((), Jump(n.top("SERVICES")))
        fip_dnat = TableRule((), Jump(n.top("fip-dnat")))
        return [
            self._chain(n.top("PREROUTING"), (fip_dnat, services)),
            self._chain(n.top("OUTPUT"), (fip_dnat, services)),
            self._chain(
                n.top("POSTROUTING"),
                (
                    TableRule((), Jump(n.top("fip-snat"))),
                    # Service traffic marked for it (hairpin, off-node
                    # backends, external Cluster-policy traffic).
                    *self._masquerade((MarkMatch.has(self.masq_mark),)),
                    *self._tunnel_source(),
                    TableRule((), Jump(n.top("nat-outgoing"))),
                ),
            ),
            self._chain(n.top("fip-dnat"), dnat),
            self._chain(n.top("fip-snat"), snat),
            self._chain(
                n.top("nat-outgoing"), self._masquerade(tuple(leaving), self.outgoing_address)
            ),
        ]

    def _tunnel_source(self) -> list[TableRule]:
        """Host traffic into the tunnel from a host address other than the
        tunnel's own (a socket bound to the wrong address, a service IP the
        kernel NATed after picking the source) takes the tunnel address, or
        replies could not find their way back; as Felix does."""
        if not self.tunnel:
            return []
        return self._masquerade(
            (
                Interface(self.tunnel, inbound=False),
                LocalAddress(Side.SRC, negate=True, out_interface=True),
                LocalAddress(Side.SRC),
            )
        )

    def _masquerade(self, match: tuple[Match, ...], to: str = "") -> list[TableRule]:
        """MASQUERADE what ``match`` selects (SNAT to ``to`` if given), within
        ``NATPortRange`` if set.

        The kernel takes a port range only with a protocol that has ports
        (it means nothing to ICMP), so with a range there is one rule for
        TCP and UDP and a last one, without ports, for the rest -- as Felix
        writes it.
        """

        def rewrite(ports: tuple[int, int] | None) -> Masquerade | Snat:
            return Snat(to, ports) if to else Masquerade(ports)

        if not self.nat_port_range:
            return [TableRule(match, rewrite(None))]
        return [
            *(
                TableRule((Protocol(proto), *match), rewrite(self.nat_port_range))
                for proto in ("tcp", "udp")
            ),
            TableRule(match, rewrite(None)),
        ]

    def hooks(self) -> Mapping[str, tuple[R, ...]]:
        n = self.names
        return {
            builtin: self.out.rules([TableRule((), Jump(n.top(builtin)))])
            for builtin in ("PREROUTING", "OUTPUT", "POSTROUTING")
        }
