"""The HCN interface: the only way the Windows platform reaches the Host Network Service.

Objects travel as JSON values in Microsoft's HCN V2 schema, keyed exactly
as hcsshim's ``hcn`` package marshals them: ``HostComputeNetwork``,
``HostComputeEndpoint`` and ``HostComputeLoadBalancer`` carry their id as
``"ID"``; ``Policies`` are ``[{"Type": ..., "Settings": {...}}]``; ACL
lists, ports and protocols are comma-separated strings; ``Priority`` and
the ``Flags`` fields are numbers.

Two implementations: :mod:`dataplane.windows.sim.simhost` (a simulated host
that enforces HNS's rules, for Linux) and :mod:`dataplane.windows.hns.hcn_ctypes`,
the ``ctypes`` binding to ``computenetwork.dll`` (Windows only). Both raise :class:`HcnError` with
the HRESULT HNS returns, so callers can tell "not found" from "refused".

Each method is one logical HNS operation, made of HCN function calls as
hcsshim makes them (a modify: open, modify, close; a listing: enumerate,
then open, query, close per object). :attr:`HCN.calls` counts every one by
HCN function name (``OpenEndpoint``, ``ModifyEndpoint``, ...): on a real
host each is a round trip to the service, so that is what a sync costs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from dataplane.errors import ProgrammingError

__all__ = [
    "DISTRIBUTION_SOURCE_IP",
    "ENDPOINTS_OF_NETWORK",
    "ENDPOINT_REMOTE",
    "ERROR_ALREADY_EXISTS",
    "E_FAIL",
    "E_INVALIDARG",
    "E_NOTIMPL",
    "FEATURES",
    "HCN",
    "HCN_E_ENDPOINT_NOT_FOUND",
    "HCN_E_INVALID_POLICY",
    "HCN_E_INVALID_POLICY_TYPE",
    "HCN_E_NETWORK_NOT_FOUND",
    "HCN_E_POLICY_NOT_FOUND",
    "LB_DSR",
    "LB_IPV6",
    "LB_NOT_FOUND",
    "LB_PROTOCOLS",
    "PM_LOCAL_ROUTED_VIP",
    "PM_VIP_EXTERNAL_IP",
    "EndpointRead",
    "HcnError",
    "HnsVersion",
    "Json",
    "WriteAfterRead",
    "writes",
]

Json = dict[str, Any]

# HRESULTs (Microsoft's HCN reference, "HCN HRESULT values"; winerror.h).
HCN_E_NETWORK_NOT_FOUND = 0x803B0001
HCN_E_ENDPOINT_NOT_FOUND = 0x803B0002
HCN_E_POLICY_NOT_FOUND = 0x803B0008
HCN_E_INVALID_POLICY = 0x803B000D
HCN_E_INVALID_POLICY_TYPE = 0x803B000E
ERROR_ALREADY_EXISTS = 0x800700B7  # HRESULT_FROM_WIN32(ERROR_ALREADY_EXISTS)
LB_NOT_FOUND = 0x80070490  # HRESULT_FROM_WIN32(ERROR_NOT_FOUND): HNS's answer for a gone LB
E_NOTIMPL = 0x80004001
E_FAIL = 0x80004005
E_INVALIDARG = 0x80070057  # "The parameter is incorrect": HNS's answer to a malformed object

# Flag and enum values of hcsshim's hcn package, as HNS takes them in JSON.
ENDPOINT_REMOTE = 1  # EndpointFlags: RemoteEndpoint (a pod on another node)
LB_DSR = 1  # LoadBalancerFlags: EnableDirectServerReturn
LB_IPV6 = 2
PM_LOCAL_ROUTED_VIP = 2  # LoadBalancerPortMappingFlags
PM_VIP_EXTERNAL_IP = 16
DISTRIBUTION_SOURCE_IP = 2  # LoadBalancerDistribution: per client address (ClientIP affinity)
LB_PROTOCOLS = {"tcp": 6, "udp": 17, "sctp": 132}  # IANA numbers a port mapping takes

# The query filter key HNS matches an endpoint's network by (hcsshim's
# ListEndpointsOfNetwork: the V1 name, HNS converts it).
ENDPOINTS_OF_NETWORK = "VirtualNetwork"

_NOT_FOUND = frozenset({HCN_E_NETWORK_NOT_FOUND, HCN_E_ENDPOINT_NOT_FOUND, LB_NOT_FOUND})

# HCN functions that change what HNS holds; every other call reads.
_WRITES = ("Create", "Modify", "Delete")


def writes(calls: Counter[str]) -> Counter[str]:
    """The calls among ``calls`` that change HNS: what a sync must make, reads aside."""
    return Counter({k: n for k, n in calls.items() if n > 0 and k.startswith(_WRITES)})


class HcnError(ProgrammingError):
    """An HCN call failed: the call, the object, the HRESULT and HNS's error record."""

    def __init__(self, call: str, target: str, hresult: int, record: str = "") -> None:
        self.call = call
        self.target = target
        self.hresult = hresult & 0xFFFFFFFF
        self.record = record
        detail = f": {record}" if record else ""
        super().__init__(f"Hcn{call} {target or '-'} failed, HRESULT 0x{self.hresult:08X}{detail}")

    @property
    def not_found(self) -> bool:
        return self.hresult in _NOT_FOUND


@dataclass(frozen=True, order=True, slots=True)
class HnsVersion:
    """The host's HNS version, as ``HNSCall GET /globals/version`` reports it."""

    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    def supports(self, feature: str) -> bool:
        """True if ``feature`` (a key of :data:`FEATURES`) exists on this version."""
        return any(low <= self <= high for low, high in FEATURES[feature])


_ANY = HnsVersion(2**31 - 1, 2**31 - 1)

# Version ranges per feature, as hcsshim's hcnglobals.go gates them.
FEATURES: dict[str, tuple[tuple[HnsVersion, HnsVersion], ...]] = {
    "ACL": ((HnsVersion(7, 2), _ANY),),
    "RemoteSubnet": ((HnsVersion(9, 2), _ANY),),
    "DSR": ((HnsVersion(9, 3), HnsVersion(9, 2**31 - 1)), (HnsVersion(10, 2), _ANY)),
    "IPv6DualStack": ((HnsVersion(11, 10), _ANY),),
    "SessionAffinity": ((HnsVersion(12, 0), _ANY),),
    "SetPolicy": ((HnsVersion(13, 0), _ANY),),
    "NestedIpSet": ((HnsVersion(15, 0), _ANY),),
    "ModifyLoadbalancer": ((HnsVersion(15, 4), _ANY),),
}


@dataclass(frozen=True, slots=True)
class EndpointRead:
    """One endpoint read through one handle, and what was written through it.

    ``endpoint`` is as queried, before the write; ``written`` the request
    made (None: none asked for); ``error`` its failure, if it failed (the
    endpoint then holds what ``endpoint`` says).
    """

    endpoint: Json
    written: Json | None = None
    error: HcnError | None = None


# Decides, from an endpoint just read, the ModifyEndpoint request to make
# through the same handle (None: none). Runs in the calling worker thread.
WriteAfterRead = Callable[[Json], Json | None]


class HCN(Protocol):
    """What the Windows platform needs of HNS; blocking calls (run them in a thread)."""

    @property
    def calls(self) -> Counter[str]:
        """HCN calls made so far, by HCN function name."""
        ...

    def version(self) -> HnsVersion: ...

    def list_networks(self) -> list[Json]:
        """Every network, in full."""
        ...

    def list_endpoints(self) -> list[Json]:
        """Every endpoint, in full (local ones and remote ones)."""
        ...

    def list_load_balancers(self) -> list[Json]: ...

    def enumerate_endpoints(self, network_id: str) -> list[str]:
        """The ids of ``network_id``'s endpoints: one ``HcnEnumerateEndpoints``,
        filtered as hcsshim's ``ListEndpointsOfNetwork`` filters it."""
        ...

    def read_endpoint(self, endpoint_id: str, then: WriteAfterRead | None = None) -> EndpointRead:
        """Open, query, and close one endpoint; with ``then``, the modify it
        asks for goes through the same handle (4 calls, not 6)."""
        ...

    def enumerate_load_balancers(self) -> list[str]:
        """Every load balancer's id: one ``HcnEnumerateLoadBalancers``."""
        ...

    def get_load_balancer(self, load_balancer_id: str) -> Json:
        """Open, query, and close one load balancer."""
        ...

    def modify_network(self, network_id: str, request: Json) -> None:
        """``HcnModifyNetwork``: a ``ModifySettingRequest`` (``ResourceType`` Policy)."""
        ...

    def create_endpoint(self, network_id: str, endpoint: Json) -> Json:
        """``HcnCreateEndpoint`` on ``network_id``: the endpoint, read back only
        if HNS chose its id (``endpoint`` names none), else as asked."""
        ...

    def create_endpoints(self, network_id: str, endpoints: list[Json]) -> list[Json | HcnError]:
        """Each of ``endpoints`` created through one handle on ``network_id`` (an
        open and a close for all, a create and a close each): per endpoint, as
        :meth:`create_endpoint` returns it or the error that refused it."""
        ...

    def modify_endpoint(self, endpoint_id: str, request: Json) -> None:
        """``HcnModifyEndpoint``: e.g. replace its ACLs (``RequestType`` Update)."""
        ...

    def delete_endpoint(self, endpoint_id: str) -> None: ...

    def create_load_balancer(self, load_balancer: Json) -> Json:
        """``HcnCreateLoadBalancer``: read back only if HNS chose its id."""
        ...

    def modify_load_balancer(self, load_balancer_id: str, load_balancer: Json) -> Json:
        """``HcnModifyLoadBalancer`` (HNS ≥ 15.4): the whole new value."""
        ...

    def delete_load_balancer(self, load_balancer_id: str) -> None: ...

    def flush(self) -> None:
        """Persist the host where it is simulated (after each apply); nothing on a real host."""
        ...
