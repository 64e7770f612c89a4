"""A simulated HNS host: HCN V2 objects in memory, HNS's rules and errors, optionally a file.

It stands in for a Windows node's Host Network Service wherever Windows
cannot run (tests, the benchmark, ``--platform windows --hns-fake FILE``).
What it enforces, as HNS does (the checks are in
:mod:`dataplane.windows.sim.simhost_rules`; a refused call raises
:class:`~dataplane.windows.hns.hcn.HcnError` and changes nothing):

* objects are HCN V2 JSON (:mod:`dataplane.windows.hns.hcn`); ids are GUIDs it
  assigns, unless the caller gives one;
* an endpoint belongs to an existing network; ids are unique; deleting or
  modifying what is not there fails with HNS's "not found" HRESULT;
* an address is held by at most one endpoint of a network; a remote
  endpoint (``Flags`` 1, kube-proxy's for a pod on another node) has one
  valid ``IpConfigurations`` address and a dashed ``MacAddress``, and on an
  Overlay network a ``ProviderAddress`` policy with a valid address;
* ``ModifyEndpoint`` with ``RequestType`` ``Update`` replaces all of the
  endpoint's policies of the types it carries (the whole ACL list at once),
  ``Add`` appends, ``Remove`` removes equal ones;
* every ACL is validated (:func:`dataplane.windows.hns.acl.parse_acl`); an
  address naming a set must name a ``SetPolicy`` of the endpoint's network;
  IPv6 in ACLs needs dual stack (11.10), ``SetPolicy`` 13.0, nested sets
  15.0;
* a load balancer lists existing endpoints and at least one port mapping
  of TCP, UDP or SCTP with ports 1-65535; session affinity needs 12.0, DSR
  9.3/10.2, the IPv6 flag 11.10, and its VIPs are valid addresses of the
  family that flag says; ``ModifyLoadBalancer`` needs 15.4;
* two load balancers may not share a frontend (VIPs, protocol, external
  port, and for node ports the family and the ``LocalRoutedVIP`` flag);
* this model's own choice: an endpoint a load balancer still lists cannot
  be deleted (HNS keeps load balancers' endpoint lists consistent).

It counts calls as a real host is called through ``computenetwork.dll``
(:mod:`dataplane.windows.hns.hcn_ctypes`, as hcsshim calls it): a listing is
one enumerate plus an open, a query and a close per object; a modify an
open, the modify and a close (and a query where the new value is read
back); a create the create, a query and a close. A test through the fake
DLL holds the two counts equal, so every call count and benchmark made on
this host is a real host's. It can add a per-call latency and fails calls
on demand (``fault``), so a test can see what a sync costs and that the
driver converges after faults.

With a ``path`` the host lives in that file, shared with other processes
as a real host is shared with the CNI (:mod:`dataplane.windows.sim.simhost_file`): every call
re-reads the file if another process changed it, and every change is
written back at once, in place. ``Calls`` in the file accumulates across
runs and processes; :attr:`SimHost.calls` is this process's own. A write
re-encodes only the objects the call changed (each object's text is kept
between writes), so a call costs the same on a host of ten endpoints or a
thousand but for the bytes written; objects changed behind the calls'
back (a test's tampering through :attr:`SimHost.endpoints` and the like)
reach the file at :meth:`SimHost.flush`.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dataplane.windows.hns.hcn import (
    E_FAIL,
    E_NOTIMPL,
    ERROR_ALREADY_EXISTS,
    HCN_E_ENDPOINT_NOT_FOUND,
    HCN_E_NETWORK_NOT_FOUND,
    LB_NOT_FOUND,
    EndpointRead,
    HcnError,
    HnsVersion,
    Json,
    WriteAfterRead,
)
from dataplane.windows.sim.policy_merges import merged_endpoint, merged_network
from dataplane.windows.sim.simhost_file import HostFile
from dataplane.windows.sim.simhost_rules import (
    check_endpoint,
    check_endpoint_policies,
    check_endpoint_unused,
    check_load_balancer,
    check_network_policies,
    guid,
    policy_request,
)
from dataplane.windows.sim.simhost_sync import NEWEST, SECTIONS, STORES, FileSync

__all__ = ["NEWEST", "SimHost"]

# Decides whether a call fails: (HCN function name, object id) -> fail?
Fault = Callable[[str, str], bool]


class SimHost(FileSync):
    """The simulated host; thread-safe (the platform calls it from worker threads)."""

    def __init__(
        self,
        version: HnsVersion = NEWEST,
        *,
        path: Path | None = None,
        latency: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
        fault: Fault | None = None,
    ) -> None:
        self._version = version
        self.path = path
        self.latency = latency
        self._sleep = sleep
        self.fault = fault
        self.networks: dict[str, Json] = {}
        self.endpoints: dict[str, Json] = {}
        self.load_balancers: dict[str, Json] = {}
        self._calls: Counter[str] = Counter()  # this process's, since it started
        self._saved_calls: Counter[str] = Counter()  # the file's, when last read or written
        self._unsaved_calls: Counter[str] = Counter()  # ours since then
        self._lock = threading.Lock()
        self._file = HostFile(path) if path is not None else None
        # Each object's text as last written, by kind and id; what a write
        # access touched (kind, id) is encoded again, or everything when
        # _encoded_all is False (after a re-read or a flush).
        self._encoded: dict[str, dict[str, bytes]] = {kind: {} for kind in SECTIONS}
        self._touched: set[tuple[str, str]] = set()
        self._encoded_all = False
        self._writing = False

    # --- the file -----------------------------------------------------------

    @classmethod
    def load(cls, path: Path, **kwargs: Any) -> SimHost:
        """The host saved in ``path``, kept in step with it
        (:mod:`dataplane.windows.sim.simhost_file`).

        Raises:
            ValueError: the file is not a host (HcnError-free, so a bad
                file is told apart from a refused call).
            OSError: the file cannot be opened.
        """
        host = cls(path=path, **kwargs)
        host._file = HostFile(path, create=False)  # a missing file is an error, not a host
        try:
            with host._access(write=False):
                pass
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from exc
        return host

    # --- HCN ------------------------------------------------------------------

    @property
    def calls(self) -> Counter[str]:
        return self._calls

    def version(self) -> HnsVersion:
        with self._access(write=False):
            self._call("HNSCall", "/globals/version")
            return self._version

    def _call(self, name: str, target: str = "") -> None:
        """Count, wait and maybe fail one HCN function call; the caller holds the lock."""
        self._calls[name] += 1
        self._unsaved_calls[name] += 1
        if self.latency:
            self._sleep(self.latency)
        if self.fault is not None and self.fault(name, target):
            raise HcnError(name, target, E_FAIL, "injected fault")

    def _close(self, kind: str) -> None:
        """``HcnClose<kind>``: counted and waited for, never failing."""
        self._calls[f"Close{kind}"] += 1
        self._unsaved_calls[f"Close{kind}"] += 1
        if self.latency:
            self._sleep(self.latency)

    @contextlib.contextmanager
    def _opened(self, kind: str, object_id: str) -> Iterator[Json]:
        """``HcnOpen<kind>`` ... ``HcnClose<kind>`` around the body, as the binding does."""
        self._call(f"Open{kind}", object_id)
        self._touch(kind, object_id)  # a write through the handle changes it
        found = self._get(STORES[kind](self), object_id, f"Open{kind}")
        try:
            yield found
        finally:
            self._close(kind)

    def _query(self, kind: str, obj: Json) -> Json:
        self._call(f"Query{kind}Properties", str(obj["ID"]))
        return copy.deepcopy(obj)

    def _list(self, kind: str) -> list[Json]:
        """What the binding's listing costs: one enumerate, then open, query
        and close per object (hcsshim's ``List*`` do the same)."""
        self._call(f"Enumerate{kind}s")
        out = []
        for object_id in list(STORES[kind](self)):
            with self._opened(kind, object_id) as obj:
                out.append(self._query(kind, obj))
        return out

    def list_networks(self) -> list[Json]:
        with self._access(write=False):
            return self._list("Network")

    def list_endpoints(self) -> list[Json]:
        with self._access(write=False):
            return self._list("Endpoint")

    def list_load_balancers(self) -> list[Json]:
        with self._access(write=False):
            return self._list("LoadBalancer")

    def enumerate_endpoints(self, network_id: str) -> list[str]:
        with self._access(write=False):
            self._call("EnumerateEndpoints", network_id)
            network = guid(network_id)
            return [
                i
                for i, ep in self.endpoints.items()
                if guid(str(ep.get("HostComputeNetwork", ""))) == network
            ]

    def read_endpoint(self, endpoint_id: str, then: WriteAfterRead | None = None) -> EndpointRead:
        with self._access(write=True), self._opened("Endpoint", endpoint_id) as endpoint:
            found = self._query("Endpoint", endpoint)
            request = then(copy.deepcopy(found)) if then is not None else None
            if request is None:
                return EndpointRead(found)
            try:
                self._call("ModifyEndpoint", endpoint_id)
                self._modify_endpoint(endpoint, endpoint_id, request)
            except HcnError as exc:
                return EndpointRead(found, request, exc)
            return EndpointRead(found, request)

    def enumerate_load_balancers(self) -> list[str]:
        with self._access(write=False):
            self._call("EnumerateLoadBalancers")
            return list(self.load_balancers)

    def get_load_balancer(self, load_balancer_id: str) -> Json:
        with self._access(write=False), self._opened("LoadBalancer", load_balancer_id) as lb:
            return self._query("LoadBalancer", lb)

    def stored(self, kind: str) -> dict[str, Json]:
        """For set-up and the fake DLL only: the objects of ``kind`` (``Network``,
        ``Endpoint``, ``LoadBalancer``) as the host and its file hold them now, by
        id; uncounted."""
        with self._access(write=False):
            return dict(STORES[kind](self))

    def add_network(self, network: Json) -> Json:
        """Set-up only (the CNI's job, not the driver's): a network, uncounted."""
        with self._access(write=True):
            net = copy.deepcopy(network)
            net["ID"] = guid(net.get("ID") or str(uuid.uuid4()))
            self._touch("Network", net["ID"])
            self.networks[net["ID"]] = net
            return copy.deepcopy(net)

    def add_local_endpoint(self, network_id: str, endpoint: Json) -> Json:
        """Set-up only: an endpoint as the CNI creates it for a pod, uncounted."""
        with self._access(write=True):
            ep = self._new_endpoint("CreateEndpoint", network_id, endpoint)
            return copy.deepcopy(ep)

    def remove_local_endpoint(self, endpoint_id: str) -> None:
        """Set-up only: the CNI deletes a pod's endpoint, uncounted; KeyError if not there."""
        with self._access(write=True):
            check_endpoint_unused(endpoint_id, self.load_balancers)
            self._touch("Endpoint", endpoint_id)
            del self.endpoints[guid(endpoint_id)]

    def modify_network(self, network_id: str, request: Json) -> None:
        with self._access(write=True), self._opened("Network", network_id) as network:
            self._call("ModifyNetwork", network_id)
            kind, policies = policy_request(request, "ModifyNetwork", network_id)
            check_network_policies(network, kind, policies, self._version)
            network["Policies"] = merged_network(network.get("Policies") or [], kind, policies)

    def create_endpoint(self, network_id: str, endpoint: Json) -> Json:
        (created,) = self.create_endpoints(network_id, [endpoint])
        if isinstance(created, HcnError):
            raise created
        return created

    def create_endpoints(self, network_id: str, endpoints: list[Json]) -> list[Json | HcnError]:
        with self._access(write=True), self._opened("Network", network_id):
            out: list[Json | HcnError] = []
            for endpoint in endpoints:
                try:
                    self._call("CreateEndpoint", network_id)
                    created = self._new_endpoint("CreateEndpoint", network_id, endpoint)
                except HcnError as exc:
                    out.append(exc)
                    continue
                try:
                    out.append(self._created("Endpoint", endpoint, created))
                finally:
                    self._close("Endpoint")
            return out

    def _created(self, kind: str, asked: Json, created: Json) -> Json:
        """What the binding returns for a create: read back (a query) only when HNS
        chose the id; else what was asked, with the id and network HNS holds."""
        if not asked.get("ID"):
            return self._query(kind, created)
        out = {**copy.deepcopy(asked), "ID": created["ID"]}
        if "HostComputeNetwork" in created:
            out["HostComputeNetwork"] = created["HostComputeNetwork"]
        return out

    def modify_endpoint(self, endpoint_id: str, request: Json) -> None:
        with self._access(write=True), self._opened("Endpoint", endpoint_id) as endpoint:
            self._call("ModifyEndpoint", endpoint_id)
            self._modify_endpoint(endpoint, endpoint_id, request)

    def _modify_endpoint(self, endpoint: Json, endpoint_id: str, request: Json) -> None:
        kind, policies = policy_request(request, "ModifyEndpoint", endpoint_id)
        network = self.networks.get(guid(endpoint.get("HostComputeNetwork", "")), {})
        check_endpoint_policies(network, policies, self._version, "ModifyEndpoint", endpoint_id)
        endpoint["Policies"] = merged_endpoint(endpoint.get("Policies") or [], kind, policies)

    def delete_endpoint(self, endpoint_id: str) -> None:
        with self._access(write=True):
            self._call("DeleteEndpoint", endpoint_id)
            self._get(self.endpoints, endpoint_id, "DeleteEndpoint")
            self._touch("Endpoint", endpoint_id)
            check_endpoint_unused(endpoint_id, self.load_balancers)
            del self.endpoints[guid(endpoint_id)]

    def create_load_balancer(self, load_balancer: Json) -> Json:
        with self._access(write=True):
            self._call("CreateLoadBalancer")
            lb = copy.deepcopy(load_balancer)
            lb["ID"] = guid(lb.get("ID") or str(uuid.uuid4()))
            self._touch("LoadBalancer", lb["ID"])
            if lb["ID"] in self.load_balancers:
                raise HcnError("CreateLoadBalancer", lb["ID"], ERROR_ALREADY_EXISTS, "exists")
            check_load_balancer(
                lb,
                "CreateLoadBalancer",
                endpoints=self.endpoints,
                load_balancers=self.load_balancers,
                version=self._version,
                skip=None,
            )
            self.load_balancers[lb["ID"]] = lb
            try:
                return self._created("LoadBalancer", load_balancer, lb)
            finally:
                self._close("LoadBalancer")

    def modify_load_balancer(self, load_balancer_id: str, load_balancer: Json) -> Json:
        with self._access(write=True), self._opened("LoadBalancer", load_balancer_id):
            self._call("ModifyLoadBalancer", load_balancer_id)
            if not self._version.supports("ModifyLoadbalancer"):
                raise HcnError("ModifyLoadBalancer", load_balancer_id, E_NOTIMPL, "not supported")
            lb = copy.deepcopy(load_balancer)
            lb["ID"] = guid(load_balancer_id)
            check_load_balancer(
                lb,
                "ModifyLoadBalancer",
                endpoints=self.endpoints,
                load_balancers=self.load_balancers,
                version=self._version,
                skip=lb["ID"],
            )
            self.load_balancers[lb["ID"]] = lb
            return self._query("LoadBalancer", lb)

    def delete_load_balancer(self, load_balancer_id: str) -> None:
        with self._access(write=True):
            self._call("DeleteLoadBalancer", load_balancer_id)
            self._get(self.load_balancers, load_balancer_id, "DeleteLoadBalancer")
            self._touch("LoadBalancer", load_balancer_id)
            del self.load_balancers[guid(load_balancer_id)]

    # --- helpers (the rules themselves are in simhost_rules) -------------------

    def _get(self, store: dict[str, Json], object_id: str, call: str) -> Json:
        found = store.get(guid(object_id))
        if found is None:
            code = {
                "OpenNetwork": HCN_E_NETWORK_NOT_FOUND,
                "OpenEndpoint": HCN_E_ENDPOINT_NOT_FOUND,
                "DeleteEndpoint": HCN_E_ENDPOINT_NOT_FOUND,
            }.get(call, LB_NOT_FOUND)
            raise HcnError(call, object_id, code, "not found")
        return found

    def _new_endpoint(self, call: str, network_id: str, endpoint: Json) -> Json:
        network = self.networks.get(guid(network_id))
        if network is None:
            raise HcnError(call, network_id, HCN_E_NETWORK_NOT_FOUND, "network not found")
        ep = copy.deepcopy(endpoint)
        ep["ID"] = guid(ep.get("ID") or str(uuid.uuid4()))
        self._touch("Endpoint", ep["ID"])
        if ep["ID"] in self.endpoints:
            raise HcnError(call, ep["ID"], ERROR_ALREADY_EXISTS, "endpoint exists")
        ep["HostComputeNetwork"] = network["ID"]
        check_endpoint_policies(network, ep.get("Policies") or [], self._version, call, ep["ID"])
        check_endpoint(network, ep, self.endpoints, call)
        self.endpoints[ep["ID"]] = ep
        return ep
