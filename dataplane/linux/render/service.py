"""Service renderer: kube-proxy's iptables NAT, for one IP version. Pure.

Per service port (chain names hash the service and port)::

    cali-SERVICES ─▶ destination-IP tree ─▶ -d VIP -p P --dport N
        ├ cluster IP      ─▶ cali-svc-* (all usable backends) or cali-svl-* (local only,
        │                    internalTrafficPolicy=Local)
        ├ external/LB IP  ─▶ [cali-fwl-*: loadBalancerSourceRanges] ─▶ cali-ext-*
        └ node port (any local address, via cali-NODEPORTS) ─▶ cali-ext-*
    cali-ext-*  Cluster policy: mark for masquerade, then cali-svc-*.
                Local policy: pods and the node itself go to cali-svc-*
                (the node masqueraded); the outside world only to
                cali-svl-*, unmasqueraded, so backends see the client.
    cali-svc-*  [ClientIP affinity: -m recent checks] then random choice
                with exactly equal odds (probabilities 1/n, 1/(n-1), ..., 1)
    cali-sep-*  hairpin: mark for masquerade; off-node backend reached from
                outside the pools: mark too; [affinity: -m recent --set];
                DNAT to the backend.

Masquerading happens only where marked: hairpin, traffic from outside the
pools to an off-node backend, and external traffic of Cluster-policy
services. A service port with nowhere to go is rejected at once in the
filter table (not left to time out); Local-policy external traffic with no
local backend is dropped, as kube-proxy does. The destination tree makes
the per-packet cost grow with the log of the number of frontends.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from dataplane.linux.iptables.chains import IptChain, IptRule
from dataplane.linux.iptables.serialise import action_text
from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.rules.action import SetMark
from dataplane.linux.rules.chain import Chain
from dataplane.linux.rules.marks import Marks
from dataplane.model.services import Backend, Service, ServicePort

__all__ = ["Frontend", "RenderedService", "ServiceRenderer", "local_endpoints"]

_LEAF = 16  # frontends matched directly before the destination tree branches
_BRANCH_BITS = 4  # each tree level splits on this many more address bits


def _set_mark(bit: int) -> str:
    return action_text(SetMark.on(bit))


def _family(address: str) -> int:
    return 6 if ":" in address else 4


def local_endpoints(local: Iterable[Backend], version: int) -> int:
    """How many of ``local`` (a service's usable local backends) are of
    IPv``version``: a dual-stack pod is one backend per family."""
    return sum(1 for b in local if _family(b.address) == version)


def _hash(text: str, length: int = 16) -> str:
    return base64.urlsafe_b64encode(hashlib.sha224(text.encode()).digest()).decode()[:length]


@dataclass(frozen=True, slots=True)
class Frontend:
    """One address (or node port) + protocol + port, and where it leads."""

    address: str | None  # None: a node port, on every local address
    protocol: str
    port: int
    target: str | None  # chain to jump to; None: reject (nowhere to go)


@dataclass(slots=True)
class RenderedService:
    chains: list[IptChain] = field(default_factory=list)
    frontends: list[Frontend] = field(default_factory=list)
    local_endpoints: int = 0  # for the health-check node port


@dataclass(frozen=True, slots=True)
class ServiceRenderer:
    version: int
    names: ChainNames
    marks: Marks
    pools_set: str  # kernel name of the all-IP-pools set for this version

    def _name(self, kind: str, *parts: str) -> str:
        return f"{self.names.prefix}{kind}-{_hash('|'.join(parts))}"

    def _dest(self, address: str, port: int) -> str:
        return f"[{address}]:{port}" if self.version == 6 else f"{address}:{port}"

    def _mask(self) -> str:
        return "255.255.255.255" if self.version == 4 else "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"

    def _balance(
        self,
        name: str,
        service: Service,
        port: ServicePort,
        backends: Sequence[Backend],
        chains: list[IptChain],
    ) -> str | None:
        """A chain choosing among ``backends`` (plus their sep chains), or None if none."""
        seps: list[tuple[str, Backend, int]] = []
        for backend in backends:
            target_port = backend.port_for(port)
            if target_port is None or _family(backend.address) != self.version:
                continue
            sep = self._name(
                "sep", str(service.key), port.name, port.protocol, backend.address, str(target_port)
            )
            seps.append((sep, backend, target_port))
        if not seps:
            return None
        rules: list[IptRule] = []
        if service.session_affinity:
            rules += [
                IptRule(
                    f"-m recent --name {sep} --mask {self._mask()} --rsource --rcheck"
                    f" --seconds {service.affinity_timeout} --reap",
                    f"-j {sep}",
                )
                for sep, _, _ in seps
            ]
        n = len(seps)
        for i, (sep, _, _) in enumerate(seps):
            if i < n - 1:
                probability = 1.0 / (n - i)
                rules.append(
                    IptRule(
                        f"-m statistic --mode random --probability {probability:.10f}", f"-j {sep}"
                    )
                )
            else:
                rules.append(IptRule("", f"-j {sep}"))
        chains.append(Chain(name, tuple(rules)))
        for sep, backend, target_port in seps:
            sep_rules = [
                IptRule(f"-s {backend.address}", _set_mark(self.marks.masq), comment="hairpin")
            ]
            if not backend.local:
                sep_rules.append(
                    IptRule(
                        f"-m set ! --match-set {self.pools_set} src",
                        _set_mark(self.marks.masq),
                        comment="off-node backend",
                    )
                )
            recent = (
                f" -m recent --name {sep} --mask {self._mask()} --rsource --set"
                if service.session_affinity
                else ""
            )
            sep_rules.append(
                IptRule(
                    f"-p {port.protocol}{recent}",
                    f"-j DNAT --to-destination {self._dest(backend.address, target_port)}",
                )
            )
            chains.append(Chain(sep, tuple(sep_rules)))
        return name

    def render(self, service: Service, unhealthy: frozenset[str] = frozenset()) -> RenderedService:
        out = RenderedService()
        if service.type == "ExternalName":
            return out
        local = service.usable(local_only=True, unhealthy=unhealthy)
        everyone = service.usable(local_only=False, unhealthy=unhealthy)
        # A dual-stack pod is one backend per family: count this family's.
        out.local_endpoints = local_endpoints(local, self.version)
        m = self.marks
        key = str(service.key)
        for port in service.ports:
            ident = (key, port.name, port.protocol, str(port.port))
            all_chain = self._balance(
                self._name("svc", *ident), service, port, everyone, out.chains
            )
            local_chain = self._balance(self._name("svl", *ident), service, port, local, out.chains)
            internal = local_chain if service.internal_local else all_chain
            for vip in service.cluster_ips:
                if _family(vip) == self.version:
                    out.frontends.append(Frontend(vip, port.protocol, port.port, internal))
            externals = [a for a in service.external_ips if _family(a) == self.version]
            balancers = [a for a in service.load_balancer_ips if _family(a) == self.version]
            if not (externals or balancers or port.node_port):
                continue
            ext_name = self._name("ext", *ident)
            if service.external_local:
                ext_rules = []
                if all_chain:
                    ext_rules += [
                        IptRule(f"-m set --match-set {self.pools_set} src", f"-j {all_chain}"),
                        IptRule("-m addrtype --src-type LOCAL", _set_mark(m.masq)),
                        IptRule("-m addrtype --src-type LOCAL", f"-j {all_chain}"),
                    ]
                ext_rules.append(
                    IptRule("", f"-j {local_chain}")
                    if local_chain
                    else IptRule("", _set_mark(m.drop), comment="no local backends")
                )
                ext_target: str | None = ext_name
                out.chains.append(Chain(ext_name, tuple(ext_rules)))
            elif all_chain:
                ext_target = ext_name
                out.chains.append(
                    Chain(
                        ext_name, (IptRule("", _set_mark(m.masq)), IptRule("", f"-j {all_chain}"))
                    )
                )
            else:
                ext_target = None
            for address in externals:
                out.frontends.append(Frontend(address, port.protocol, port.port, ext_target))
            lb_target = ext_target
            if balancers and service.source_ranges and ext_target:
                ranges = [r for r in service.source_ranges if _family(r) == self.version]
                lb_target = self._name("fwl", *ident)
                out.chains.append(
                    Chain(
                        lb_target,
                        (
                            *(IptRule(f"-s {r}", f"-j {ext_target}") for r in ranges),
                            IptRule(
                                "", _set_mark(m.drop), comment="not in loadBalancerSourceRanges"
                            ),
                        ),
                    )
                )
            for address in balancers:
                out.frontends.append(Frontend(address, port.protocol, port.port, lb_target))
            if port.node_port:
                out.frontends.append(Frontend(None, port.protocol, port.node_port, ext_target))
        # A local backend's sep chain is shared by the svc and svl chains.
        unique = {c.name: c for c in out.chains}
        out.chains = list(unique.values())
        return out

    # --- shared chains ---------------------------------------------------------------

    def dispatch(self, frontends: Iterable[Frontend]) -> list[IptChain]:
        """cali-SERVICES, its destination tree, and cali-NODEPORTS."""
        n = self.names
        routed = sorted(
            (f for f in frontends if f.address is not None and f.target),
            key=lambda f: (int(ipaddress.ip_address(f.address or "")), f.protocol, f.port),
        )
        chains: list[IptChain] = []
        bits = 32 if self.version == 4 else 128

        def leaf(f: Frontend) -> IptRule:
            return IptRule(f"-d {f.address} -p {f.protocol} --dport {f.port}", f"-j {f.target}")

        def build(name: str, members: list[Frontend], prefix_len: int) -> None:
            if len(members) <= _LEAF or prefix_len >= bits:
                chains.append(Chain(name, tuple(leaf(f) for f in members)))
                return
            step = min(_BRANCH_BITS, bits - prefix_len)
            groups: dict[ipaddress.IPv4Network | ipaddress.IPv6Network, list[Frontend]] = {}
            for f in members:
                net = ipaddress.ip_network(f"{f.address}/{prefix_len + step}", strict=False)
                groups.setdefault(net, []).append(f)
            if len(groups) == 1:  # all share more bits: descend without a rule
                build(name, members, prefix_len + step)
                return
            rules: list[IptRule] = []
            for net, group in groups.items():
                if len(group) <= 2:
                    rules.extend(leaf(f) for f in group)
                    continue
                child = f"{n.prefix}svd-{_hash(str(net))}"
                rules.append(IptRule(f"-d {net}", f"-g {child}"))
                build(child, group, prefix_len + step)
            chains.append(Chain(name, tuple(rules)))

        root = n.top("svc-dispatch")
        build(root, routed, 0)
        node_ports = sorted(
            (f for f in frontends if f.address is None and f.target),
            key=lambda f: (f.port, f.protocol),
        )
        chains.append(
            Chain(
                n.top("NODEPORTS"),
                tuple(
                    IptRule(f"-p {f.protocol} --dport {f.port}", f"-j {f.target}")
                    for f in node_ports
                ),
            )
        )
        chains.append(
            Chain(
                n.top("SERVICES"),
                (
                    IptRule("", f"-j {root}"),
                    IptRule("-m addrtype --dst-type LOCAL", f"-j {n.top('NODEPORTS')}"),
                ),
            )
        )
        return chains

    def rejects(self, frontends: Iterable[Frontend]) -> IptChain:
        """Filter-table chain refusing service ports with nowhere to go."""
        rules: list[IptRule] = []
        for f in sorted(frontends, key=lambda f: (f.address or "", f.protocol, f.port)):
            if f.target:
                continue
            where = f"-d {f.address}" if f.address else "-m addrtype --dst-type LOCAL"
            reject = "-j REJECT --reject-with " + (
                "icmp-port-unreachable" if self.version == 4 else "icmp6-port-unreachable"
            )
            rules.append(IptRule(f"{where} -p {f.protocol} --dport {f.port}", reject))
        return Chain(self.names.top("svc-reject"), tuple(rules))
