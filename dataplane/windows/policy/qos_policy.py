"""A workload's egress bandwidth limit as HNS's endpoint ``QOS`` policy.

HNS can cap what an endpoint sends and nothing else of a pod's QoS
controls: its endpoint policy ``{"Type": "QOS", "Settings":
{"MaximumOutgoingBandwidthInBytes": N}}`` (hcsshim's
``QosPolicySetting``; N in bytes per second, as the Windows CNI plugins
fill it from ``kubernetes.io/egress-bandwidth``). So the egress bandwidth
is programmed here; ingress bandwidth, burst and peak rate, packet rates
and connection limits have no HNS form and are said once by the platform.

The endpoints' QOS policy is ours: Felix turns the bandwidth annotations
into ``qos_controls``, so a QOS policy the desired state does not ask for
is removed. It is written with its own ``ModifyEndpoint`` (``Update``
replaces only the policies of the types it carries, so the ACL list and
the QOS policy never touch each other) and compared with what the last
listing read, so a refresh puts back a limit changed or removed by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from dataplane.core.quarantine import Unsaid
from dataplane.windows.hns.calls import CallHcn
from dataplane.windows.hns.hcn import HCN, HcnError, Json
from dataplane.windows.view.hns_view import QOS, QOS_SETTING, HnsEndpoint, HnsView

__all__ = ["QosProgrammer", "qos_policy"]

K = TypeVar("K")


def qos_policy(bytes_per_second: int) -> Json:
    return {"Type": QOS, "Settings": {QOS_SETTING: bytes_per_second}}


def _request(kind: str, policy: Json) -> Json:
    return {"ResourceType": "Policy", "RequestType": kind, "Settings": {"Policies": [policy]}}


class QosProgrammer(Generic[K]):
    """Each workload's egress cap (bytes per second, or None), and the writes that put it in HNS."""

    def __init__(self, hcn: HCN, call: CallHcn) -> None:
        self._hcn = hcn
        self._call = call
        self._wanted: dict[K, int | None] = {}
        self.pending: set[K] = set()
        self.failing: dict[K, str] = {}
        self._unsaid: Unsaid[K] = Unsaid()

    def take_refusals(self) -> list[tuple[K, str]]:
        """(workload, why) newly refused since the last call: one report each."""
        return self._unsaid.news(self.failing)

    def want(self, key: K, bytes_per_second: int | None) -> None:
        if key in self._wanted and self._wanted[key] == bytes_per_second:
            return
        self._wanted[key] = bytes_per_second
        self.pending.add(key)

    def forget(self, key: K) -> None:
        self._wanted.pop(key, None)
        self.pending.discard(key)
        self.failing.pop(key, None)

    def recheck_all(self) -> None:
        """After a fresh listing: what HNS holds decides which need a write."""
        self.pending = set(self._wanted)

    async def apply(self, view: HnsView, find: Callable[[K], HnsEndpoint | None]) -> bool:
        """Write every pending cap; True if HNS must be listed again."""
        relist = False
        for key in sorted(self.pending, key=str):
            endpoint = find(key)
            if endpoint is None:
                continue  # not created by the CNI yet
            wanted = self._wanted[key]
            if endpoint.qos != wanted:
                if wanted is not None:
                    request = _request("Update", qos_policy(wanted))
                else:
                    request = _request("Remove", qos_policy(endpoint.qos or 0))
                try:
                    await self._call(self._hcn.modify_endpoint, endpoint.id, request)
                except HcnError as exc:
                    if exc.not_found:
                        view.forget(endpoint.id)
                        relist = True
                    else:
                        self.failing[key] = str(exc)
                    continue
                endpoint.qos = wanted
            self.pending.discard(key)
            self.failing.pop(key, None)
        return relist
