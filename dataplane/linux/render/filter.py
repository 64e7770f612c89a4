"""Filter-table renderer: policies, profiles, endpoints, dispatch, hooks.

Pure: model values in, :class:`Chain` values out, for one IP version.

Packet path (Felix's design, our names)::

    FORWARD ─▶ cali-FORWARD ─┬ ─▶ cali-qos-from-wl, cali-qos-to-wl (packet rates)
                             ├ established/related: ACCEPT; invalid: DROP
                             ├ ─▶ cali-from-hep-forward ─▶ cali-fhfw-<if> (applyOnForward ingress)
                             ├ -i cali+ ─▶ cali-from-wl-dispatch ─▶ cali-fw-<if>   (egress policy)
                             ├ -o cali+ ─▶ cali-to-wl-dispatch   ─▶ cali-tw-<if>   (ingress policy)
                             ├ ─▶ cali-to-hep-forward ─▶ cali-thfw-<if>   (applyOnForward egress)
                             └ from or to a workload, or accepted, and not dropped: ACCEPT
    INPUT   ─▶ cali-INPUT    ─┬ -i cali+ ─▶ cali-wl-to-host: cali-qos-from-wl;
                             │             established/related: ACCEPT;
                             │             invalid: DROP; egress policy, then
                             │             DefaultEndpointToHostAction
                             └ ─▶ cali-from-host-endpoint ─▶ cali-fh-<if> (failsafes first)
    OUTPUT  ─▶ cali-OUTPUT   ─┬ -o cali+: RETURN (the host may reach its pods)
                             └ ─▶ cali-to-host-endpoint   ─▶ cali-th-<if> (failsafes first)

An endpoint chain runs each tier with policies for its direction: policies
in order until one allows (accept mark, RETURN) or passes (pass mark: on to
the next tier); what no policy decided meets the tier's default action
(end-of-tier drop, or pass). Profiles run only for traffic every tier
passed (or when there are no tiers), and whatever nothing allowed is
dropped. Dispatch chains are a prefix tree on interface names, so a packet
meets a few dozen rules, not one per endpoint.

Forwarded traffic meets every enforcement point on its way, as in Felix:
the host endpoint it arrives through, the workload it leaves (or the one
it reaches), and the host endpoint it leaves through; each drops or
returns, and only what none dropped is accepted. A host endpoint's
forward chain allows what it has no applyOnForward policy for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from dataplane.config import Config, ProtoPort
from dataplane.linux.netlink.overlay_plan import VXLAN_SOURCES_SET
from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.render.dispatch import DispatchTrees
from dataplane.linux.render.overlay import encap_drops, vxlan_host_rules
from dataplane.linux.render.qos_rules import connection_limit, packet_rate_chain
from dataplane.linux.render.rule import RuleRenderer, is_whole_family
from dataplane.linux.rules.action import (
    Accept,
    Drop,
    Goto,
    Jump,
    Return,
    SetMark,
    named_verdict,
)
from dataplane.linux.rules.chain import Chain, Serialiser
from dataplane.linux.rules.marks import Marks
from dataplane.linux.rules.match import (
    Addresses,
    ConnState,
    Icmp,
    Interface,
    MarkMatch,
    Match,
    Port,
    Protocol,
    Side,
)
from dataplane.linux.rules.rule import END_OF_TIER_RULE, PROFILE_TIER, Origin, TableRule
from dataplane.model import (
    Action,
    DirectionPolicy,
    EffectivePolicy,
    HostEffectivePolicy,
    HostEndpoint,
    IcmpMatch,
    Policy,
    PolicyKey,
    Profile,
    WorkloadEndpoint,
)

__all__ = [
    "ANTI_SPOOF",
    "ENDPOINT_DOWN",
    "ESTABLISHED",
    "FilterRenderer",
]

# Comments of the drops an endpoint chain ends its tiers and its profiles
# with, for people reading the ruleset (counters name them by origin).
END_OF_TIER = "end of tier "
NOTHING_ALLOWED = "no policy or profile allowed it"
ANTI_SPOOF = "source address is not the endpoint's"
ENDPOINT_DOWN = (TableRule((), Drop(), comment="endpoint is not active"),)
# A dispatch subtree's inputs within its tree: its chain, interfaces, last rule.
ESTABLISHED = TableRule((ConnState(("RELATED", "ESTABLISHED")),), Accept())
_INVALID = TableRule((ConnState(("INVALID",)),), Drop())
# Neighbour discovery and router solicitation from pods must reach the host.
_ICMPV6_TO_HOST = (130, 131, 132, 133, 135, 136)
_STEPS_KEPT = 16384  # policy steps kept (two per policy and direction)


R = TypeVar("R")


def _way(inbound: bool) -> str:
    return "inbound" if inbound else "outbound"


@dataclass(frozen=True, slots=True)
class FilterRenderer(Generic[R]):
    """The filter table for one IP version, in the syntax ``out`` spells."""

    version: int
    config: Config
    marks: Marks
    names: ChainNames
    rules: RuleRenderer
    out: Serialiser[R]
    # The dispatch trees over interface names (iptables; nftables dispatches
    # by verdict maps), with the subtrees they rendered before.
    dispatch: DispatchTrees[R] = field(init=False, compare=False, repr=False)
    # The two rules that run one policy in an endpoint's tier, per policy
    # and direction: every endpoint chain holds them, and making them again
    # for each was a third of rendering a node's workload chains.
    _steps: dict[tuple[PolicyKey, bool], tuple[TableRule, TableRule]] = field(
        init=False, compare=False, repr=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "dispatch", DispatchTrees(self.names, self.out))

    def _chain(self, name: str, rules: Iterable[TableRule]) -> Chain[R]:
        return Chain(name, self.out.rules(rules))

    # --- policies and profiles ------------------------------------------------

    def policy_chains(self, key: PolicyKey, policy: Policy) -> list[Chain[R]]:
        return [
            self._chain(
                self.names.policy(key, inbound),
                self.rules.render_all(rules, policy.tier, str(key), _way(inbound)),
            )
            for inbound, rules in ((True, policy.inbound), (False, policy.outbound))
        ]

    def profile_chains(self, name: str, profile: Profile) -> list[Chain[R]]:
        return [
            self._chain(
                self.names.profile(name, inbound),
                self.rules.render_all(rules, PROFILE_TIER, name, _way(inbound)),
            )
            for inbound, rules in ((True, profile.inbound), (False, profile.outbound))
        ]

    # --- endpoints ------------------------------------------------------------------

    def tiered_rules(
        self, policy: DirectionPolicy, inbound: bool, *, enforce: bool = True
    ) -> list[TableRule]:
        """Tiers, then profiles, then drop.

        ``policy`` is already resolved (active policies only, empty tiers
        left out) by the managers. With ``enforce`` False (untracked and
        pre-DNAT policy) only what a policy explicitly denies is dropped:
        traffic no policy decided goes on to normal policy, so there is no
        end-of-tier drop, no profile and no final drop.
        """
        out = self._tiers(policy, inbound, end_of_tier_drop=enforce)
        if enforce:
            accepted = MarkMatch.has(self.marks.accept)
            for name in policy.profiles:
                out.append(TableRule((), Jump(self.names.profile(name, inbound))))
                out.append(TableRule((accepted,), Return()))
            out.append(
                TableRule(
                    (),
                    Drop(),
                    comment=NOTHING_ALLOWED,
                    origin=Origin(PROFILE_TIER, "", _way(inbound), END_OF_TIER_RULE, "deny"),
                    counts=True,
                )
            )
        return out

    def _tiers(
        self, policy: DirectionPolicy, inbound: bool, *, end_of_tier_drop: bool
    ) -> list[TableRule]:
        m = self.marks
        passed = MarkMatch.lacks(m.pass_)
        out = [TableRule((), SetMark.off(m.accept | m.pass_))]
        for tier in policy.tiers:
            out.append(TableRule((), SetMark.off(m.pass_), comment=f"tier {tier.name}"))
            for key in tier.policies:
                out.extend(self._policy_step(key, inbound))
            if end_of_tier_drop and tier.default_action is Action.DENY:
                out.append(
                    TableRule(
                        (passed,),
                        Drop(),
                        comment=END_OF_TIER + tier.name,
                        origin=Origin(tier.name, "", _way(inbound), END_OF_TIER_RULE, "deny"),
                        counts=True,
                    )
                )
        return out

    def _policy_step(self, key: PolicyKey, inbound: bool) -> tuple[TableRule, TableRule]:
        """Jump to the policy's chain unless a tier's policy passed; back if it allowed."""
        step = self._steps.get((key, inbound))
        if step is None:
            if len(self._steps) >= _STEPS_KEPT:
                self._steps.clear()  # bounded: policies come and go
            m = self.marks
            step = (
                TableRule((MarkMatch.lacks(m.pass_),), Jump(self.names.policy(key, inbound))),
                TableRule((MarkMatch.has(m.accept),), Return()),
            )
            self._steps[(key, inbound)] = step
        return step

    def allowed_sources(self, endpoint: WorkloadEndpoint) -> tuple[str, ...]:
        """The source networks ``endpoint`` may send from, of this version."""
        own = endpoint.ipv4_nets if self.version == 4 else endpoint.ipv6_nets
        return tuple(
            n
            for n in own + endpoint.allow_spoofed_source_prefixes
            if (":" in n) == (self.version == 6)
        )

    def _anti_spoof(self, endpoint: WorkloadEndpoint) -> list[TableRule]:
        allowed = self.allowed_sources(endpoint)
        comment = ANTI_SPOOF
        if any(is_whole_family(n) for n in allowed):
            # Every source is allowed; and nft refuses "! -s 0.0.0.0/0" at
            # commit (EINVAL) though its parser passes it.
            return []
        if not allowed:
            return [TableRule((), Drop(), comment=comment)]
        return [TableRule((Addresses(Side.SRC, allowed, negate=True),), Drop(), comment=comment)]

    def workload_chains(
        self, endpoint: WorkloadEndpoint, policy: EffectivePolicy
    ) -> list[Chain[R]]:
        to_name = self.names.to_workload(endpoint.name)
        from_name = self.names.from_workload(endpoint.name)
        if not endpoint.admin_up:
            return [self._chain(to_name, ENDPOINT_DOWN), self._chain(from_name, ENDPOINT_DOWN)]
        ingress = connection_limit(endpoint, True) + self.tiered_rules(policy.ingress, True)
        egress = (
            connection_limit(endpoint, False)
            + self._anti_spoof(endpoint)
            + encap_drops(self.config)
            + self.tiered_rules(policy.egress, False)
        )
        return [self._chain(to_name, ingress), self._chain(from_name, egress)]

    def host_endpoint_chains(
        self, endpoint: HostEndpoint, policy: HostEffectivePolicy
    ) -> list[Chain[R]]:
        n = self.names
        ingress = [
            ESTABLISHED,
            TableRule((), Jump(n.top("failsafe-in"))),
            *self.tiered_rules(policy.normal.ingress, True),
        ]
        egress = [
            ESTABLISHED,
            TableRule((), Jump(n.top("failsafe-out"))),
            *self.tiered_rules(policy.normal.egress, False),
        ]
        # The endpoint chains end in DROP; what they allow returns with the
        # accept mark, which the top-level chain turns into ACCEPT.
        chains = [
            self._chain(n.from_host_endpoint(endpoint.name), ingress),
            self._chain(n.to_host_endpoint(endpoint.name), egress),
        ]
        # Forwarded traffic through the endpoint (applyOnForward policy).
        # Every endpoint has these chains, not only those with forward
        # policy: an endpoint of its own on an interface must shadow the
        # all-interfaces endpoint's forward policy there too (Felix).
        for inbound, name in (
            (True, n.dispatch_child("fhfw", endpoint.name)),
            (False, n.dispatch_child("thfw", endpoint.name)),
        ):
            rules = self.forward_rules(policy.forward.direction(inbound), inbound)
            chains.append(self._chain(name, rules))
        return chains

    def forward_rules(self, policy: DirectionPolicy, inbound: bool) -> list[TableRule]:
        """A host endpoint's applyOnForward policy for one direction (Felix's rules).

        With no policy for the direction, forwarded traffic is allowed. With
        some, each tier drops what no policy decided; traffic every tier
        passed returns undecided (no profiles, no final drop: Felix applies
        only policy to forwarded traffic), for the workload's policy or the
        kernel's own FORWARD chain to judge.
        """
        if not policy.tiers:
            allow = SetMark.on(self.marks.accept)
            return [TableRule((), allow, comment="no forward policy: allow")]
        return self._tiers(policy, inbound, end_of_tier_drop=True)

    # --- static chains and hooks ----------------------------------------------------

    def _failsafe(self, ports: Sequence[ProtoPort], inbound: bool) -> list[TableRule]:
        out = []
        for p in ports:
            if p.net and (":" in p.net) != (self.version == 6):
                continue
            match: list[Match] = []
            if p.net:
                match.append(Addresses(Side.SRC if inbound else Side.DST, (p.net,)))
            match += [Protocol(p.protocol), Port(Side.DST, p.port)]
            out.append(TableRule(tuple(match), Accept()))
        return out

    def _vxlan(self, inbound: bool) -> list[TableRule]:
        nodes = self.rules.ipset_name(VXLAN_SOURCES_SET, self.version)
        return vxlan_host_rules(self.config, self.version, nodes, inbound=inbound)

    def static_chains(self) -> list[Chain[R]]:
        n = self.names
        m = self.marks
        c = self.config
        prefixes = [f"{p}+" for p in c.interface_prefixes]
        accepted = MarkMatch.has(m.accept)

        def each(inbound: bool, action: Jump | Accept | Return | Goto) -> list[TableRule]:
            return [TableRule((Interface(p, inbound),), action) for p in prefixes]

        # Forwarded traffic meets, in Felix's order, the forward policy of
        # the host endpoint it arrives through, the policy of the workload
        # it leaves and of the one it reaches, and the forward policy of
        # the host endpoint it leaves through. Each drops or returns (with
        # the accept mark if it allowed), so all of them judge it. The
        # accept mark survives from pre-DNAT policy, which allowed it: such
        # traffic skips the arriving endpoint's forward policy, as in Felix.
        # What conntrack marks INVALID is dropped unless the operator said not
        # to (DisableConntrackInvalidCheck), as in Felix's endpoint chains.
        invalid = [] if c.disable_conntrack_invalid_check else [_INVALID]
        forward = [
            ESTABLISHED,
            *invalid,
            TableRule((), SetMark.off(m.all & ~m.accept)),
            TableRule((MarkMatch.lacks(m.accept),), Jump(n.top("from-hep-forward"))),
        ]
        forward += each(True, Jump(n.top("from-wl-dispatch")))
        forward += each(False, Jump(n.top("to-wl-dispatch")))
        forward.append(TableRule((), Jump(n.top("to-hep-forward"))))
        # A workload's chains end in DROP, so traffic from or to one that
        # got here was allowed by its policy; the host endpoints' forward
        # policy may leave it undecided (every tier passed). Traffic only
        # between host endpoints needs one to have allowed it, else the
        # kernel's own FORWARD chain decides.
        forward += each(True, Accept())
        forward += each(False, Accept())
        forward.append(TableRule((accepted,), Accept()))
        # Untracked policy let these through in the raw table (it set our
        # accept mark and NOTRACK); normal policy must not drop them.
        untracked = TableRule((ConnState(("UNTRACKED",)), accepted), Accept())
        # Service traffic the nat table condemned, and new connections to
        # service ports with no backend (refused at once, as kube-proxy does).
        services = [
            TableRule((MarkMatch.has(m.drop),), Drop()),
            TableRule((ConnState(("NEW",)),), Jump(n.top("svc-reject"))),
        ]
        # Packet-rate limits count every packet, established or not.
        rates = [TableRule((), Jump(packet_rate_chain(n, inbound))) for inbound in (False, True)]
        forward[0:0] = [*rates, untracked, *services]

        # IPv6 stops working without neighbour discovery, whatever the policy.
        ndp = (
            [
                TableRule((Protocol("icmpv6"), Icmp(6, IcmpMatch(t))), Accept())
                for t in _ICMPV6_TO_HOST
            ]
            if self.version == 6
            else []
        )
        # Replies from pods to the host (kubelet probes, host-network
        # clients, the node reaching a ClusterIP) are accepted before the
        # pod's egress policy and DefaultEndpointToHostAction, which judge
        # only new traffic: with Felix's default DROP the node could not
        # reach its own pods otherwise. Felix's INPUT path does the same.
        to_host: list[TableRule] = [rates[0], *ndp, ESTABLISHED, *invalid]
        to_host.append(TableRule((), Jump(n.top("from-wl-dispatch"))))
        to_host.append(
            TableRule(
                (),
                named_verdict(c.default_endpoint_to_host_action),
                comment="DefaultEndpointToHostAction",
            )
        )

        inp = [untracked, *services, *self._vxlan(True)]
        inp += each(True, Goto(n.top("wl-to-host")))
        inp += ndp
        inp += [
            TableRule((), SetMark.off(m.all)),
            TableRule((), Jump(n.top("from-host-endpoint"))),
            TableRule((accepted,), Accept()),
        ]
        out = [untracked, *services]
        out += each(False, Return())
        out += self._vxlan(False)
        out += ndp
        out += [
            TableRule((), SetMark.off(m.all)),
            TableRule((), Jump(n.top("to-host-endpoint"))),
            TableRule((accepted,), Accept()),
        ]
        return [
            self._chain(n.top("FORWARD"), forward),
            self._chain(n.top("wl-to-host"), to_host),
            self._chain(n.top("INPUT"), inp),
            self._chain(n.top("OUTPUT"), out),
            self._chain(n.top("failsafe-in"), self._failsafe(c.failsafe_inbound_host_ports, True)),
            self._chain(
                n.top("failsafe-out"), self._failsafe(c.failsafe_outbound_host_ports, False)
            ),
        ]

    def hooks(self) -> Mapping[str, tuple[R, ...]]:
        n = self.names
        return {
            builtin: self.out.rules([TableRule((), Jump(n.top(builtin)))])
            for builtin in ("INPUT", "FORWARD", "OUTPUT")
        }
