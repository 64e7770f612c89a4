"""A workload endpoint's whole ACL list (pure): host allow, anti-spoofing, both directions.

What one ``ModifyEndpoint`` sends. The directions come from
:func:`~dataplane.windows.policy.acl_render.render_direction`; around them:

* the host's own addresses may reach the endpoint (priority 900, Felix's
  host-to-endpoint rule: kubelet probes);
* an ``Out`` packet whose source is not the endpoint's (nor an allowed
  spoofed prefix) is blocked ahead of all policy, as on Linux;
* an endpoint that is not active blocks everything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dataplane.model import DirectionPolicy, EffectivePolicy, WorkloadEndpoint
from dataplane.windows.policy.acl_policy import Acl, branch_acls
from dataplane.windows.policy.acl_render import (
    BASE_PRIORITY,
    DirectionAcls,
    FailClosed,
    RenderContext,
    render_direction,
    render_host_rule,
)
from dataplane.windows.policy.addresses import AddressSet
from dataplane.windows.policy.match import ANY, Branch, Side

__all__ = ["EndpointAcls", "render_endpoint", "render_fail_closed"]

_SPOOF_PRIORITY = BASE_PRIORITY - 1

DirectionRenderer = Callable[[DirectionPolicy, bool], DirectionAcls]


@dataclass(frozen=True, slots=True)
class EndpointAcls:
    acls: tuple[Acl, ...]
    fail_closed: tuple[FailClosed, ...] = ()


def _anti_spoof(endpoint: WorkloadEndpoint, versions: tuple[int, ...]) -> list[Acl]:
    own = (*endpoint.ipv4_nets, *endpoint.ipv6_nets, *endpoint.allow_spoofed_source_prefixes)
    out: list[Acl] = []
    for version in versions:
        foreign = AddressSet.everything(version).difference(AddressSet.of(version, own))
        if foreign:
            branch = Branch(None, Side(foreign), Side())
            out.extend(branch_acls(branch, "Block", False, _SPOOF_PRIORITY))
    return out


def render_endpoint(
    endpoint: WorkloadEndpoint,
    policy: EffectivePolicy,
    context: RenderContext,
    host_addresses: tuple[str, ...],
    direction: DirectionRenderer | None = None,
) -> EndpointAcls:
    """Every ACL of ``endpoint``; ``direction`` may memoise per-direction renders."""
    if not endpoint.admin_up:
        blocked = [*branch_acls(ANY, "Block", True, 1), *branch_acls(ANY, "Block", False, 1)]
        return EndpointAcls(tuple(blocked))

    def render(p: DirectionPolicy, inbound: bool) -> DirectionAcls:
        return render_direction(p, inbound, context)

    each = direction or render
    ingress, egress = each(policy.ingress, True), each(policy.egress, False)
    acls = (
        *render_host_rule(host_addresses, context.versions),
        *_anti_spoof(endpoint, context.versions),
        *ingress.acls,
        *egress.acls,
    )
    return EndpointAcls(acls, ingress.fail_closed + egress.fail_closed)


def render_fail_closed(host_addresses: tuple[str, ...], versions: tuple[int, ...]) -> EndpointAcls:
    """What an endpoint gets when HNS refuses its list and it holds no ACL (so is open).

    Everything blocked but the host's own traffic: the pod is cut off, not
    exposed, and kubelet's probes still tell the operator it is alive.
    """
    blocked = (
        *branch_acls(ANY, "Block", True, BASE_PRIORITY),
        *branch_acls(ANY, "Block", False, BASE_PRIORITY),
    )
    return EndpointAcls((*render_host_rule(host_addresses, versions), *blocked))
