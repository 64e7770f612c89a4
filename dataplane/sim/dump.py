"""A sim state as stable, sorted text: replay output and golden files."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataplane.model import Rule, TierInfo
from dataplane.model.routes import RoutePriority

if TYPE_CHECKING:
    from dataplane.sim.platform import SimState

__all__ = ["describe_rule", "dump_state"]


def _join(items: object) -> str:
    return ",".join(str(i) for i in items)  # type: ignore[attr-defined]


def describe_rule(rule: Rule) -> str:
    """One line per rule, in roughly Calico's own vocabulary."""
    parts = [rule.action.value]
    if rule.ip_version:
        parts.append(f"ipv{rule.ip_version}")
    if rule.protocol:
        parts.append(f"proto={rule.protocol}")
    if rule.not_protocol:
        parts.append(f"!proto={rule.not_protocol}")
    for name in (
        "src_nets",
        "not_src_nets",
        "dst_nets",
        "not_dst_nets",
        "src_ports",
        "not_src_ports",
        "dst_ports",
        "not_dst_ports",
        "src_ip_set_ids",
        "not_src_ip_set_ids",
        "dst_ip_set_ids",
        "not_dst_ip_set_ids",
        "src_named_port_ip_set_ids",
        "not_src_named_port_ip_set_ids",
        "dst_named_port_ip_set_ids",
        "not_dst_named_port_ip_set_ids",
        "dst_ip_port_set_ids",
    ):
        value = getattr(rule, name)
        if value:
            label = name.replace("not_", "!").replace("_ip_set_ids", "_sets")
            parts.append(f"{label}={_join(value)}")
    if rule.icmp:
        parts.append(f"icmp={rule.icmp}")
    if rule.not_icmp:
        parts.append(f"!icmp={rule.not_icmp}")
    return " ".join(parts)


def _describe_tiers(label: str, tiers: tuple[TierInfo, ...]) -> list[str]:
    prefix = f"    {label} tier" if label else "    tier"
    return [
        f"{prefix} {tier.name} (default {tier.default_action.value}):"
        f" ingress [{_join(tier.ingress_policies)}] egress [{_join(tier.egress_policies)}]"
        for tier in tiers
    ]


def _describe_hosts(state: SimState) -> list[str]:
    encap = state.encapsulation
    modes = [
        m
        for m, on in (
            ("ipip", encap.ipip),
            ("vxlan", encap.vxlan),
            ("vxlan-v6", encap.vxlan_v6),
            ("no-encap", encap.no_encap),
        )
        if on
    ]
    out = [f"encapsulation: {', '.join(modes) or 'none'}", f"hosts ({len(state.hosts)}):"]
    for name in sorted(state.hosts):
        host = state.hosts[name]
        addresses = [
            f"{a}/{p}" if p else a
            for a, p in ((host.ipv4, host.ipv4_prefix), (host.ipv6, host.ipv6_prefix))
            if a
        ]
        labels = ",".join(f"{k}={v}" for k, v in host.labels)
        out.append(
            f"  {name} {' '.join(addresses) or '-'}"
            + (f" as={host.asnumber}" if host.asnumber else "")
            + (f" labels={labels}" if labels else "")
        )
    return out


def _describe_routes(state: SimState) -> list[str]:
    out = [*_describe_hosts(state), f"vxlan tunnel endpoints ({len(state.vteps)}):"]
    for node in sorted(state.vteps):
        vtep = state.vteps[node]
        out.append(f"  {node}")
        out.extend(
            f"    ipv{version} {family.address} mac {family.mac} via {family.parent_address}"
            for version, family in ((4, vtep.v4), (6, vtep.v6))
            if family is not None
        )
    out.append(f"routes ({len(state.routes)}):")
    for dst in sorted(state.routes):
        route = state.routes[dst]
        types = "|".join(t.name or "" for t in route.types) or "CIDR_INFO"
        parts = [f"  {dst} {types} pool={route.pool_type.value}"]
        if route.dst_node_name:
            parts.append(f"node={route.dst_node_name}")
        if route.dst_node_ip:
            parts.append(f"node_ip={route.dst_node_ip}")
        parts.extend(
            flag
            for flag, on in (
                ("same-subnet", route.same_subnet),
                ("nat-outgoing", route.nat_outgoing),
                ("local-workload", route.local_workload),
                ("borrowed", route.borrowed),
                ("tunnel-ipip", route.tunnel.ipip),
                ("tunnel-vxlan", route.tunnel.vxlan),
                ("tunnel-wireguard", route.tunnel.wireguard),
                ("elevated", route.priority is RoutePriority.ELEVATED),
            )
            if on
        )
        out.append(" ".join(parts))
    return out


def dump_state(state: SimState) -> str:
    """Render a state as stable, sorted text (used by replay and golden tests)."""
    out = [f"ip sets ({len(state.ipsets)}):"]
    for set_id in sorted(state.ipsets):
        s = state.ipsets[set_id]
        out.append(f"  {set_id} type={s.type.value} members={len(s.members)}")
        out.extend(f"    {m}" for m in sorted(s.members))
    out.append(f"policies ({len(state.policies)}):")
    for key in sorted(state.policies):
        pol = state.policies[key]
        flags = "".join(
            f" {flag}"
            for flag, on in (("untracked", pol.untracked), ("pre-dnat", pol.pre_dnat))
            if on
        )
        out.append(f"  tier={pol.tier} {key}{flags}")
        out.extend(f"    in:  {describe_rule(r)}" for r in pol.inbound)
        out.extend(f"    out: {describe_rule(r)}" for r in pol.outbound)
    out.append(f"profiles ({len(state.profiles)}):")
    for name in sorted(state.profiles):
        prof = state.profiles[name]
        out.append(f"  {name}")
        out.extend(f"    in:  {describe_rule(r)}" for r in prof.inbound)
        out.extend(f"    out: {describe_rule(r)}" for r in prof.outbound)
    out.append(f"workload endpoints ({len(state.workload_endpoints)}):")
    for wkey in sorted(state.workload_endpoints):
        wep = state.workload_endpoints[wkey]
        nets = _join(wep.ipv4_nets + wep.ipv6_nets)
        out.append(f"  {wkey} iface={wep.name} state={wep.state} nets={nets}")
        out.extend(_describe_tiers("", wep.tiers))
        if wep.profile_ids:
            out.append(f"    profiles [{_join(wep.profile_ids)}]")
    out.append(f"ip pools ({len(state.ip_pools)}):")
    for pool_id in sorted(state.ip_pools):
        pool = state.ip_pools[pool_id]
        out.append(f"  {pool_id} {pool.cidr}{' masquerade' if pool.masquerade else ''}")
    out.append(f"services ({len(state.services)}):")
    for skey in sorted(state.services):
        svc = state.services[skey]
        ports = ",".join(
            f"{p.name or '-'}:{p.protocol}/{p.port}"
            + (f"(node {p.node_port})" if p.node_port else "")
            for p in svc.ports
        )
        out.append(f"  {skey} {svc.type} ips={_join(svc.cluster_ips)} ports={ports}")
        out.extend(
            f"    backend {b.address} {b.state.value}{' local' if b.local else ''}"
            for b in svc.backends
        )
    out.extend(_describe_routes(state))
    out.append(f"host endpoints ({len(state.host_endpoints)}):")
    for hkey in sorted(state.host_endpoints):
        hep = state.host_endpoints[hkey]
        out.append(f"  {hkey} iface={hep.name or '*'}")
        for label, tiers in (
            ("", hep.tiers),
            ("untracked", hep.untracked_tiers),
            ("pre-dnat", hep.pre_dnat_tiers),
            ("forward", hep.forward_tiers),
        ):
            out.extend(_describe_tiers(label, tiers))
        if hep.profile_ids:
            out.append(f"    profiles [{_join(hep.profile_ids)}]")
    return "\n".join(out) + "\n"
