"""What HNS refused and the Windows platform holds back, named as operators know it.

Endpoints and networks HNS refused are retried alone with backoff; this
names them for ``show`` and the status: by workload, by the IP sets a
refused set write carried, by route, by service. And every rule in force
that HNS could not express exactly (it fails closed).
"""

from __future__ import annotations

from dataplane.core.platform import ObjectError
from dataplane.core.quarantine import Rejection
from dataplane.model import WorkloadEndpointKey
from dataplane.windows.overlay.vxlan_programmer import VxlanProgrammer
from dataplane.windows.policy.acl_render import FailClosed
from dataplane.windows.policy.programmers import EndpointProgrammer, SetProgrammer
from dataplane.windows.services.lb_programmer import LbProgrammer

__all__ = ["WindowsReports"]


class WindowsReports:
    """The report methods of :class:`~dataplane.windows.platform.WindowsPlatform`."""

    _endpoints: EndpointProgrammer[WorkloadEndpointKey]
    _sets: SetProgrammer
    _vxlan: VxlanProgrammer
    _lbs: LbProgrammer

    def quarantined(self) -> list[tuple[str, Rejection]]:
        """What HNS refused, retried alone with backoff: ("workload K" or "network ID", why)."""
        return [
            *((f"workload {key}", why) for key, why in self._endpoints.held.items()),
            *((f"network {network_id}", why) for network_id, why in self._sets.held.items()),
            *self._vxlan.quarantined(),
            *self._lbs.quarantined(),
        ]

    def object_errors(self) -> list[ObjectError]:
        """Everything HNS refused and held back now, by object, with HNS's message.

        Set writes are refused per network; they are named by the IP sets the
        refused request carried (by the network if it named none). Load
        balancers are named by their service, remote endpoints by address.
        """
        found: dict[tuple[str, str], str] = {}
        for key, why in self._endpoints.held.items():
            found.setdefault(("workload_endpoint", str(key)), why.reason)
        for network_id, why in self._sets.held.items():
            failed = self._sets.failed_sets.get(network_id)
            named = [("ipset", s) for s in failed] if failed else [("network", network_id)]
            for ident in named:
                found.setdefault(ident, why.reason)
        for (_network, prefix), why in self._vxlan.held.items():
            found.setdefault(("route", prefix), why.reason)
        for lb_key, why in self._lbs.held.items():
            lb = self._lbs.wanted.get(lb_key)
            ident = ("service", lb.service) if lb else ("load_balancer", str(lb_key))
            found.setdefault(ident, why.reason)
        for address, why in self._lbs.remotes_held.items():
            found.setdefault(("remote_endpoint", address), why.reason)
        for note in self._lbs.stranded():  # no source VIP, a frontend another holds
            found.setdefault(("service", note.service), note.text)
        return [ObjectError(kind, ident, reason) for (kind, ident), reason in sorted(found.items())]

    def fail_closed(self) -> list[FailClosed]:
        """Every rule in force now that HNS could not express exactly."""
        notes = {n for r in self._endpoints.all_rendered() for n in r.fail_closed}
        return sorted(notes, key=str)
