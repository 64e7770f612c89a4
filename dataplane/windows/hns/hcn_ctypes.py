"""The real HCN: ``computenetwork.dll`` through ``ctypes`` (Windows Server 2019 and later).

Every function is declared as Microsoft documents it (Host Compute Network
service API reference, header ``ComputeNetwork.h``; all ``HRESULT WINAPI``)::

    HcnEnumerateNetworks(PCWSTR Query, PWSTR* Networks, PWSTR* ErrorRecord)
    HcnOpenNetwork(REFGUID Id, PHCN_NETWORK Network, PWSTR* ErrorRecord)
    HcnModifyNetwork(HCN_NETWORK Network, PCWSTR Settings, PWSTR* ErrorRecord)
    HcnQueryNetworkProperties(HCN_NETWORK Network, PCWSTR Query,
                              PWSTR* Properties, PWSTR* ErrorRecord)
    HcnCloseNetwork(HCN_NETWORK Network)
    HcnEnumerateEndpoints(PCWSTR Query, PWSTR* Endpoints, PWSTR* ErrorRecord)
    HcnCreateEndpoint(HCN_NETWORK Network, REFGUID Id, PCWSTR Settings,
                      PHCN_ENDPOINT Endpoint, PWSTR* ErrorRecord)
    HcnOpenEndpoint(REFGUID Id, PHCN_ENDPOINT Endpoint, PWSTR* ErrorRecord)
    HcnModifyEndpoint(HCN_ENDPOINT Endpoint, PCWSTR Settings, PWSTR* ErrorRecord)
    HcnQueryEndpointProperties(HCN_ENDPOINT Endpoint, PCWSTR Query,
                               PWSTR* Properties, PWSTR* ErrorRecord)
    HcnDeleteEndpoint(REFGUID Id, PWSTR* ErrorRecord)
    HcnCloseEndpoint(HCN_ENDPOINT Endpoint)
    HcnEnumerateLoadBalancers(PCWSTR Query, PWSTR* LoadBalancers, PWSTR* ErrorRecord)
    HcnCreateLoadBalancer(REFGUID Id, PCWSTR Settings,
                          PHCN_LOADBALANCER LoadBalancer, PWSTR* ErrorRecord)
    HcnOpenLoadBalancer(REFGUID Id, PHCN_LOADBALANCER LoadBalancer, PWSTR* ErrorRecord)
    HcnModifyLoadBalancer(HCN_LOADBALANCER LoadBalancer, PCWSTR Settings,
                          PWSTR* ErrorRecord)
    HcnQueryLoadBalancerProperties(HCN_LOADBALANCER LoadBalancer, PCWSTR Query,
                                   PWSTR* Properties, PWSTR* ErrorRecord)
    HcnDeleteLoadBalancer(REFGUID Id, PWSTR* ErrorRecord)
    HcnCloseLoadBalancer(HCN_LOADBALANCER LoadBalancer)

plus ``vmcompute.dll``'s ``HNSCall(PCWSTR Method, PCWSTR Path, PCWSTR
Request, PWSTR* Response)`` (HNS v1, as hcsshim declares it), used once for
``GET /globals/version``, and ``ole32.dll``'s ``void CoTaskMemFree(LPVOID)``.

Conventions kept here, as hcsshim keeps them: strings are UTF-16
(``c_wchar_p`` on Windows); a ``REFGUID`` points at a ``GUID`` laid out as
``uuid.UUID.bytes_le``; the handles (``DECLARE_HANDLE``) are opaque
pointers; every string HNS returns (result and error record) is freed with
``CoTaskMemFree``, and every handle opened is closed, on failure too. A call
failed if its HRESULT is negative **or** its error record is non-empty. A
create passes the zero GUID: HNS assigns the id (or takes it from the
settings). Listing is ``Enumerate`` (a JSON array of ids), then ``Open``,
``QueryProperties`` with the same query and ``Close`` for each.
"""

from __future__ import annotations

import ctypes
import json
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from ctypes import POINTER, c_long, c_void_p, c_wchar_p
from typing import Any

from dataplane.errors import PlatformUnavailableError
from dataplane.windows.hns.hcn import (
    E_FAIL,
    E_NOTIMPL,
    ENDPOINTS_OF_NETWORK,
    EndpointRead,
    HcnError,
    HnsVersion,
    Json,
    WriteAfterRead,
)

__all__ = ["GUID", "SIGNATURES", "Bind", "HcnBinding"]

E_INVALIDARG = 0x80070057


class GUID(ctypes.Structure):
    """Windows' GUID: Data1 (u32), Data2 (u16), Data3 (u16), Data4 (8 bytes)."""

    _fields_ = [
        ("Data1", ctypes.c_uint32),
        ("Data2", ctypes.c_uint16),
        ("Data3", ctypes.c_uint16),
        ("Data4", ctypes.c_uint8 * 8),
    ]

    @classmethod
    def of(cls, value: uuid.UUID) -> GUID:
        return cls.from_buffer_copy(value.bytes_le)


HRESULT = c_long
_GUIDP = POINTER(GUID)  # REFGUID
_HANDLE = c_void_p  # HCN_NETWORK, HCN_ENDPOINT, HCN_LOADBALANCER
_OUT = POINTER(c_void_p)  # PWSTR* and PHCN_*: the callee stores a pointer

_HCN = "computenetwork.dll"

# (library, result type, argument types) by function, as documented above.
SIGNATURES: dict[str, tuple[str, Any, tuple[Any, ...]]] = {
    "HcnEnumerateNetworks": (_HCN, HRESULT, (c_wchar_p, _OUT, _OUT)),
    "HcnOpenNetwork": (_HCN, HRESULT, (_GUIDP, _OUT, _OUT)),
    "HcnModifyNetwork": (_HCN, HRESULT, (_HANDLE, c_wchar_p, _OUT)),
    "HcnQueryNetworkProperties": (_HCN, HRESULT, (_HANDLE, c_wchar_p, _OUT, _OUT)),
    "HcnCloseNetwork": (_HCN, HRESULT, (_HANDLE,)),
    "HcnEnumerateEndpoints": (_HCN, HRESULT, (c_wchar_p, _OUT, _OUT)),
    # The network's handle comes first.
    "HcnCreateEndpoint": (_HCN, HRESULT, (_HANDLE, _GUIDP, c_wchar_p, _OUT, _OUT)),
    "HcnOpenEndpoint": (_HCN, HRESULT, (_GUIDP, _OUT, _OUT)),
    "HcnModifyEndpoint": (_HCN, HRESULT, (_HANDLE, c_wchar_p, _OUT)),
    "HcnQueryEndpointProperties": (_HCN, HRESULT, (_HANDLE, c_wchar_p, _OUT, _OUT)),
    "HcnDeleteEndpoint": (_HCN, HRESULT, (_GUIDP, _OUT)),
    "HcnCloseEndpoint": (_HCN, HRESULT, (_HANDLE,)),
    "HcnEnumerateLoadBalancers": (_HCN, HRESULT, (c_wchar_p, _OUT, _OUT)),
    "HcnCreateLoadBalancer": (_HCN, HRESULT, (_GUIDP, c_wchar_p, _OUT, _OUT)),
    "HcnOpenLoadBalancer": (_HCN, HRESULT, (_GUIDP, _OUT, _OUT)),
    "HcnModifyLoadBalancer": (_HCN, HRESULT, (_HANDLE, c_wchar_p, _OUT)),
    "HcnQueryLoadBalancerProperties": (_HCN, HRESULT, (_HANDLE, c_wchar_p, _OUT, _OUT)),
    "HcnDeleteLoadBalancer": (_HCN, HRESULT, (_GUIDP, _OUT)),
    "HcnCloseLoadBalancer": (_HCN, HRESULT, (_HANDLE,)),
    "HNSCall": ("vmcompute.dll", HRESULT, (c_wchar_p, c_wchar_p, c_wchar_p, _OUT)),
    "CoTaskMemFree": ("ole32.dll", None, (c_void_p,)),
}

# Binds one exported function: (library, name, result type, argument types) -> callable.
Bind = Callable[[str, str, Any, tuple[Any, ...]], Callable[..., Any]]

# What every query asks: the V2 schema (hcsshim's defaultQuery).
_SCHEMA = {"SchemaVersion": {"Major": 2, "Minor": 0}, "Flags": 0}
_QUERY = json.dumps(_SCHEMA)


def _filtered(filter_: dict[str, str]) -> str:
    """A query with a filter: HostComputeQuery's ``Filter`` is itself JSON, as a string."""
    return json.dumps({**_SCHEMA, "Filter": json.dumps(filter_)})


def _windows_bind() -> Bind:
    if sys.platform != "win32":
        raise PlatformUnavailableError(
            f"the HCN binding needs Windows (computenetwork.dll), not {sys.platform}"
        )
    libraries: dict[str, Any] = {}

    def bind(library: str, name: str, restype: Any, argtypes: tuple[Any, ...]) -> Any:
        if library not in libraries:
            libraries[library] = ctypes.WinDLL(library)
        return ctypes.WINFUNCTYPE(restype, *argtypes)((name, libraries[library]))

    return bind


class HcnBinding:
    """:class:`~dataplane.windows.hns.hcn.HCN` over the real service (thread-safe)."""

    def __init__(self, bind: Bind) -> None:
        self._bind = bind
        self._functions: dict[str, Callable[..., Any]] = {}
        self._lock = threading.Lock()
        self._calls: Counter[str] = Counter()

    @classmethod
    def load(cls) -> HcnBinding:
        """The binding on this Windows host; PlatformUnavailableError elsewhere."""
        binding = cls(_windows_bind())
        try:
            binding._function("HcnEnumerateEndpoints")
        except (OSError, HcnError) as exc:
            raise PlatformUnavailableError(f"computenetwork.dll unusable: {exc}") from None
        return binding

    # --- marshalling ------------------------------------------------------------

    def _function(self, name: str) -> Callable[..., Any]:
        with self._lock:
            found = self._functions.get(name)
            if found is None:
                library, restype, argtypes = SIGNATURES[name]
                try:
                    found = self._bind(library, name, restype, argtypes)
                except AttributeError:  # an older host's DLL lacks it
                    raise HcnError(name, "", E_NOTIMPL, f"not exported by {library}") from None
                self._functions[name] = found
            return found

    def _count(self, name: str) -> None:
        with self._lock:
            self._calls[name] += 1

    def _take(self, pointer: c_void_p) -> str:
        """The string HNS allocated at ``pointer`` (freed here), or "" for NULL."""
        if not pointer.value:
            return ""
        try:
            return ctypes.wstring_at(pointer.value)
        finally:
            self._function("CoTaskMemFree")(pointer.value)
            pointer.value = None

    def _hcn(self, name: str, target: str, *args: Any) -> None:
        """``Hcn<name>(*args, &ErrorRecord)``; HcnError if it failed."""
        fn = self._function(f"Hcn{name}")
        self._count(name)
        record = c_void_p()
        hresult = fn(*args, ctypes.byref(record))
        error = self._take(record)
        # hcsshim's rule: a negative HRESULT or any error record is a failure.
        if hresult < 0 or error:
            raise HcnError(name, target, hresult if hresult < 0 else E_FAIL, error)

    def _hcn_text(self, name: str, target: str, *args: Any) -> str:
        """Like :meth:`_hcn` for a function whose last output is a string."""
        output = c_void_p()
        try:
            self._hcn(name, target, *args, ctypes.byref(output))
        finally:
            text = self._take(output)  # freed on failure too
        return text

    def _open(self, kind: str, object_id: str) -> c_void_p:
        handle = c_void_p()
        guid = _guid(f"Open{kind}", object_id)
        self._hcn(f"Open{kind}", object_id, ctypes.byref(guid), ctypes.byref(handle))
        return handle

    def _close(self, kind: str, handle: c_void_p) -> None:
        self._count(f"Close{kind}")
        self._function(f"HcnClose{kind}")(handle)

    def _query(self, kind: str, object_id: str, handle: c_void_p) -> Json:
        text = self._hcn_text(f"Query{kind}Properties", object_id, handle, _QUERY)
        return _object(text, f"Query{kind}Properties", object_id)

    def _enumerate(self, kind: str, query: str = _QUERY, target: str = "") -> list[str]:
        text = self._hcn_text(f"Enumerate{kind}s", target, query)
        ids = json.loads(text) if text else []
        if not isinstance(ids, list):
            raise HcnError(f"Enumerate{kind}s", target, E_FAIL, f"not a list of ids: {text[:200]}")
        return [str(i) for i in ids]

    def _list(self, kind: str) -> list[Json]:
        out = []
        for object_id in self._enumerate(kind):
            try:
                handle = self._open(kind, str(object_id))
            except HcnError as exc:
                if exc.not_found:
                    continue  # gone between the enumeration and the open
                raise
            try:
                out.append(self._query(kind, str(object_id), handle))
            finally:
                self._close(kind, handle)
        return out

    def _create(self, kind: str, target: str, settings: Json, *handles: c_void_p) -> Json:
        """``HcnCreate<kind>(*handles, zero GUID, settings, &new)``: the object.

        The zero GUID lets HNS assign the id (or take it from ``settings``).
        Read back only when HNS chose the id: otherwise it holds what was
        asked, and a query would be one more round trip per object.
        """
        new, zero = c_void_p(), GUID.of(uuid.UUID(int=0))
        self._hcn(
            f"Create{kind}",
            target,
            *handles,
            ctypes.byref(zero),
            json.dumps(settings),
            ctypes.byref(new),
        )
        try:
            if settings.get("ID"):
                return {**settings, "ID": str(settings["ID"]).upper()}
            return self._query(kind, "", new)
        finally:
            self._close(kind, new)

    def _modify(self, kind: str, object_id: str, settings: Json, *, query: bool) -> Json:
        handle = self._open(kind, object_id)
        try:
            self._hcn(f"Modify{kind}", object_id, handle, json.dumps(settings))
            return self._query(kind, object_id, handle) if query else {}
        finally:
            self._close(kind, handle)

    # --- HCN ---------------------------------------------------------------------

    @property
    def calls(self) -> Counter[str]:
        return self._calls

    def version(self) -> HnsVersion:
        fn = self._function("HNSCall")
        self._count("HNSCall")
        response = c_void_p()
        hresult = fn("GET", "/globals/version", "", ctypes.byref(response))
        text = self._take(response)
        if hresult < 0:
            raise HcnError("HNSCall", "/globals/version", hresult, text)
        envelope = _object(text, "HNSCall", "/globals/version")
        output = envelope.get("Output")
        if not envelope.get("Success") or not isinstance(output, dict):
            raise HcnError("HNSCall", "/globals/version", E_FAIL, str(envelope.get("Error", text)))
        return HnsVersion(int(output["Major"]), int(output["Minor"]))

    def list_networks(self) -> list[Json]:
        return self._list("Network")

    def list_endpoints(self) -> list[Json]:
        return self._list("Endpoint")

    def list_load_balancers(self) -> list[Json]:
        return self._list("LoadBalancer")

    def enumerate_endpoints(self, network_id: str) -> list[str]:
        query = _filtered({ENDPOINTS_OF_NETWORK: network_id})
        return self._enumerate("Endpoint", query, network_id)

    def read_endpoint(self, endpoint_id: str, then: WriteAfterRead | None = None) -> EndpointRead:
        handle = self._open("Endpoint", endpoint_id)
        try:
            found = self._query("Endpoint", endpoint_id, handle)
            request = then(found) if then is not None else None
            if request is None:
                return EndpointRead(found)
            try:
                self._hcn("ModifyEndpoint", endpoint_id, handle, json.dumps(request))
            except HcnError as exc:
                return EndpointRead(found, request, exc)
            return EndpointRead(found, request)
        finally:
            self._close("Endpoint", handle)

    def enumerate_load_balancers(self) -> list[str]:
        return self._enumerate("LoadBalancer")

    def get_load_balancer(self, load_balancer_id: str) -> Json:
        handle = self._open("LoadBalancer", load_balancer_id)
        try:
            return self._query("LoadBalancer", load_balancer_id, handle)
        finally:
            self._close("LoadBalancer", handle)

    def modify_network(self, network_id: str, request: Json) -> None:
        self._modify("Network", network_id, request, query=False)

    def create_endpoint(self, network_id: str, endpoint: Json) -> Json:
        (created,) = self.create_endpoints(network_id, [endpoint])
        if isinstance(created, HcnError):
            raise created
        return created

    def create_endpoints(self, network_id: str, endpoints: list[Json]) -> list[Json | HcnError]:
        network = self._open("Network", network_id)
        try:
            out: list[Json | HcnError] = []
            for endpoint in endpoints:
                try:
                    created = self._create("Endpoint", network_id, endpoint, network)
                except HcnError as exc:
                    out.append(exc)
                    continue
                out.append({**created, "HostComputeNetwork": network_id.upper()})
            return out
        finally:
            self._close("Network", network)

    def modify_endpoint(self, endpoint_id: str, request: Json) -> None:
        self._modify("Endpoint", endpoint_id, request, query=False)

    def delete_endpoint(self, endpoint_id: str) -> None:
        self._hcn("DeleteEndpoint", endpoint_id, ctypes.byref(_guid("DeleteEndpoint", endpoint_id)))

    def create_load_balancer(self, load_balancer: Json) -> Json:
        return self._create("LoadBalancer", "", load_balancer)

    def modify_load_balancer(self, load_balancer_id: str, load_balancer: Json) -> Json:
        return self._modify("LoadBalancer", load_balancer_id, load_balancer, query=True)

    def delete_load_balancer(self, load_balancer_id: str) -> None:
        guid = _guid("DeleteLoadBalancer", load_balancer_id)
        self._hcn("DeleteLoadBalancer", load_balancer_id, ctypes.byref(guid))

    def flush(self) -> None:
        """HNS persists by itself."""


def _guid(call: str, text: str) -> GUID:
    try:
        return GUID.of(uuid.UUID(text))
    except ValueError:
        raise HcnError(call, text, E_INVALIDARG, "not a GUID") from None


def _object(text: str, call: str, target: str) -> Json:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise HcnError(call, target, E_FAIL, f"not a JSON object: {text[:200]}")
    return value
