"""A fake ``computenetwork.dll`` (plus ``HNSCall`` and ``CoTaskMemFree``) over a simulated host.

It follows the documented calling conventions, so the ctypes binding is
exercised through real C calls on Linux: each export is a ``CFUNCTYPE``
callback built from the argument types the binding asks for, after
checking them against Microsoft's signatures as written here (independently
of the binding's own table). Strings it returns are real allocations the
caller must give back through ``CoTaskMemFree``; handles it hands out must
be closed. Errors are HRESULTs plus an error record, as HNS returns them.
Anything the binding does wrong lands in :attr:`FakeHcnDll.errors`.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import re
import uuid
from collections.abc import Callable
from ctypes import CFUNCTYPE, POINTER, c_long, c_void_p, c_wchar_p
from typing import Any

from dataplane.windows.hns.hcn import (
    HCN_E_ENDPOINT_NOT_FOUND,
    HCN_E_NETWORK_NOT_FOUND,
    LB_NOT_FOUND,
    HcnError,
)
from dataplane.windows.hns.hcn_ctypes import GUID
from dataplane.windows.sim.simhost import SimHost

E_HANDLE = 0x80070006
E_UNEXPECTED = 0x8000FFFF

# Microsoft's HCN reference (ComputeNetwork.h), parameter types as documented.
DOCUMENTED: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "HcnEnumerateNetworks": ("computenetwork.dll", "HRESULT", ("PCWSTR", "PWSTR*", "PWSTR*")),
    "HcnOpenNetwork": ("computenetwork.dll", "HRESULT", ("REFGUID", "PHCN_NETWORK", "PWSTR*")),
    "HcnModifyNetwork": ("computenetwork.dll", "HRESULT", ("HCN_NETWORK", "PCWSTR", "PWSTR*")),
    "HcnQueryNetworkProperties": (
        "computenetwork.dll",
        "HRESULT",
        ("HCN_NETWORK", "PCWSTR", "PWSTR*", "PWSTR*"),
    ),
    "HcnCloseNetwork": ("computenetwork.dll", "HRESULT", ("HCN_NETWORK",)),
    "HcnEnumerateEndpoints": ("computenetwork.dll", "HRESULT", ("PCWSTR", "PWSTR*", "PWSTR*")),
    "HcnCreateEndpoint": (
        "computenetwork.dll",
        "HRESULT",
        ("HCN_NETWORK", "REFGUID", "PCWSTR", "PHCN_ENDPOINT", "PWSTR*"),
    ),
    "HcnOpenEndpoint": ("computenetwork.dll", "HRESULT", ("REFGUID", "PHCN_ENDPOINT", "PWSTR*")),
    "HcnModifyEndpoint": ("computenetwork.dll", "HRESULT", ("HCN_ENDPOINT", "PCWSTR", "PWSTR*")),
    "HcnQueryEndpointProperties": (
        "computenetwork.dll",
        "HRESULT",
        ("HCN_ENDPOINT", "PCWSTR", "PWSTR*", "PWSTR*"),
    ),
    "HcnDeleteEndpoint": ("computenetwork.dll", "HRESULT", ("REFGUID", "PWSTR*")),
    "HcnCloseEndpoint": ("computenetwork.dll", "HRESULT", ("HCN_ENDPOINT",)),
    "HcnEnumerateLoadBalancers": ("computenetwork.dll", "HRESULT", ("PCWSTR", "PWSTR*", "PWSTR*")),
    "HcnCreateLoadBalancer": (
        "computenetwork.dll",
        "HRESULT",
        ("REFGUID", "PCWSTR", "PHCN_LOADBALANCER", "PWSTR*"),
    ),
    "HcnOpenLoadBalancer": (
        "computenetwork.dll",
        "HRESULT",
        ("REFGUID", "PHCN_LOADBALANCER", "PWSTR*"),
    ),
    "HcnModifyLoadBalancer": (
        "computenetwork.dll",
        "HRESULT",
        ("HCN_LOADBALANCER", "PCWSTR", "PWSTR*"),
    ),
    "HcnQueryLoadBalancerProperties": (
        "computenetwork.dll",
        "HRESULT",
        ("HCN_LOADBALANCER", "PCWSTR", "PWSTR*", "PWSTR*"),
    ),
    "HcnDeleteLoadBalancer": ("computenetwork.dll", "HRESULT", ("REFGUID", "PWSTR*")),
    "HcnCloseLoadBalancer": ("computenetwork.dll", "HRESULT", ("HCN_LOADBALANCER",)),
    "HNSCall": ("vmcompute.dll", "HRESULT", ("PCWSTR", "PCWSTR", "PCWSTR", "PWSTR*")),
    "CoTaskMemFree": ("ole32.dll", "void", ("LPVOID",)),
}

# How each documented C type is passed through ctypes.
C_TYPES: dict[str, Any] = {
    "HRESULT": c_long,
    "void": None,
    "PCWSTR": c_wchar_p,
    "PWSTR*": POINTER(c_void_p),
    "REFGUID": POINTER(GUID),
    "LPVOID": c_void_p,
    **{f"HCN_{k}": c_void_p for k in ("NETWORK", "ENDPOINT", "LOADBALANCER")},
    **{f"PHCN_{k}": POINTER(c_void_p) for k in ("NETWORK", "ENDPOINT", "LOADBALANCER")},
}

_NOT_FOUND = {
    "Network": HCN_E_NETWORK_NOT_FOUND,
    "Endpoint": HCN_E_ENDPOINT_NOT_FOUND,
    "LoadBalancer": LB_NOT_FOUND,
}


def _method(export: str) -> str:
    """The method implementing ``export``: HcnOpenEndpoint -> _hcn_open_endpoint."""
    if export == "HNSCall":
        return "_hns_call"
    return "_" + re.sub(r"(?<!^)(?=[A-Z])", "_", export).lower()


def _signed(hresult: int) -> int:
    return hresult - (1 << 32) if hresult & 0x80000000 else hresult


class FakeHcnDll:
    """The three DLLs' exports over ``host``; pass :meth:`bind` to ``HcnBinding``."""

    def __init__(self, host: SimHost, *, missing: frozenset[str] = frozenset()) -> None:
        self.host = host
        self.missing = missing  # exports this "older host" lacks
        self.strings: dict[int, ctypes.Array[ctypes.c_wchar]] = {}  # live allocations
        self.handles: dict[int, tuple[str, str]] = {}  # open handle -> (kind, id)
        self.errors: list[str] = []
        self.record_only: set[str] = set()  # calls failing with S_OK and an error record
        self._next = itertools.count(0x1000)
        self._keep: list[Any] = []

    # --- the loader ---------------------------------------------------------------

    def bind(self, library: str, name: str, restype: Any, argtypes: tuple[Any, ...]) -> Any:
        doc_library, doc_result, doc_args = DOCUMENTED[name]
        expected = (doc_library, C_TYPES[doc_result], tuple(C_TYPES[a] for a in doc_args))
        if (library.lower(), restype, tuple(argtypes)) != expected:
            raise AssertionError(f"{name}: bound as {library} {restype} {argtypes}, not {expected}")
        if name in self.missing:
            raise AttributeError(f"function '{name}' not found")
        impl: Callable[..., int | None] = getattr(self, _method(name))

        def call(*args: Any) -> int | None:
            try:
                return impl(*args)
            except HcnError as exc:
                raise AssertionError(f"{name}: HcnError escaped: {exc}") from None
            except Exception as exc:
                self.errors.append(f"{name}: {exc!r}")
                return _signed(E_UNEXPECTED) if restype is not None else None

        callback = CFUNCTYPE(restype, *argtypes)(call)
        self._keep.append(callback)
        return callback

    # --- plumbing -----------------------------------------------------------------

    def _string(self, text: str) -> int:
        buffer = ctypes.create_unicode_buffer(text)
        address = ctypes.addressof(buffer)
        self.strings[address] = buffer
        return address

    def _handle(self, kind: str, object_id: str) -> int:
        handle = next(self._next)
        self.handles[handle] = (kind, object_id)
        return handle

    def _object(self, handle: int | None, kind: str) -> str:
        found = self.handles.get(handle or 0)
        if found is None or found[0] != kind:
            raise ValueError(f"bad {kind} handle {handle}")
        return found[1]

    def _run(self, name: str, record: Any, action: Callable[[], None]) -> int:
        """Run ``action``; an HcnError becomes an HRESULT and an error record."""
        if record[0]:
            self.errors.append(f"{name}: error record slot not NULL on entry")
        try:
            action()
        except HcnError as exc:
            record[0] = self._string(json.dumps({"Error": exc.record, "ErrorCode": exc.hresult}))
            return _signed(exc.hresult)
        if name in self.record_only:
            record[0] = self._string(json.dumps({"Error": "refused", "ErrorCode": 0}))
        return 0

    def _query(self, query: str | None) -> None:
        if json.loads(query or "{}").get("SchemaVersion") != {"Major": 2, "Minor": 0}:
            self.errors.append(f"query without the V2 schema: {query}")

    # --- exports ------------------------------------------------------------------

    def _enumerate(self, kind: str, query: str | None, out: Any, record: Any) -> int:
        self._query(query)
        # HNS's filters as hcsshim writes them: a JSON object inside the query's
        # "Filter" string; this fake knows the endpoints' network filter only.
        wanted = json.loads(json.loads(query or "{}").get("Filter") or "{}")
        if set(wanted) - {"VirtualNetwork"} or (wanted and kind != "Endpoint"):
            self.errors.append(f"HcnEnumerate{kind}s: a filter this fake does not know: {wanted}")
        network = str(wanted.get("VirtualNetwork", "")).upper()

        def action() -> None:
            found = self.host.stored(kind)
            ids = [
                i
                for i, obj in found.items()
                if not network or str(obj.get("HostComputeNetwork", "")).upper() == network
            ]
            out[0] = self._string(json.dumps(ids))

        return self._run(f"HcnEnumerate{kind}s", record, action)

    def _open(self, kind: str, guid: Any, out: Any, record: Any) -> int:
        object_id = str(uuid.UUID(bytes_le=bytes(guid.contents))).upper()

        def action() -> None:
            if object_id not in self.host.stored(kind):
                raise HcnError(f"Open{kind}", object_id, _NOT_FOUND[kind], "not found")
            out[0] = self._handle(kind, object_id)

        return self._run(f"HcnOpen{kind}", record, action)

    def _properties(self, kind: str, handle: int, query: str | None, out: Any, record: Any) -> int:
        self._query(query)
        object_id = self._object(handle, kind)

        def action() -> None:
            found = self.host.stored(kind).get(object_id)
            if found is None:  # deleted while the handle was open
                raise HcnError(f"Query{kind}Properties", object_id, _NOT_FOUND[kind], "gone")
            out[0] = self._string(json.dumps(found))

        return self._run(f"HcnQuery{kind}Properties", record, action)

    def _close(self, kind: str, handle: int | None) -> int:
        if self.handles.pop(handle or 0, None) is None:
            self.errors.append(f"HcnClose{kind} of a handle not open: {handle}")
            return _signed(E_HANDLE)
        return 0

    def _hcn_enumerate_networks(self, query: str | None, out: Any, record: Any) -> int:
        return self._enumerate("Network", query, out, record)

    def _hcn_enumerate_endpoints(self, query: str | None, out: Any, record: Any) -> int:
        return self._enumerate("Endpoint", query, out, record)

    def _hcn_enumerate_load_balancers(self, query: str | None, out: Any, record: Any) -> int:
        return self._enumerate("LoadBalancer", query, out, record)

    def _hcn_open_network(self, guid: Any, out: Any, record: Any) -> int:
        return self._open("Network", guid, out, record)

    def _hcn_open_endpoint(self, guid: Any, out: Any, record: Any) -> int:
        return self._open("Endpoint", guid, out, record)

    def _hcn_open_load_balancer(self, guid: Any, out: Any, record: Any) -> int:
        return self._open("LoadBalancer", guid, out, record)

    def _hcn_query_network_properties(self, h: int, q: str | None, out: Any, rec: Any) -> int:
        return self._properties("Network", h, q, out, rec)

    def _hcn_query_endpoint_properties(self, h: int, q: str | None, out: Any, rec: Any) -> int:
        return self._properties("Endpoint", h, q, out, rec)

    def _hcn_query_load_balancer_properties(self, h: int, q: str | None, out: Any, rec: Any) -> int:
        return self._properties("LoadBalancer", h, q, out, rec)

    def _hcn_close_network(self, handle: int | None) -> int:
        return self._close("Network", handle)

    def _hcn_close_endpoint(self, handle: int | None) -> int:
        return self._close("Endpoint", handle)

    def _hcn_close_load_balancer(self, handle: int | None) -> int:
        return self._close("LoadBalancer", handle)

    def _hcn_modify_network(self, handle: int, settings: str, record: Any) -> int:
        network_id = self._object(handle, "Network")
        return self._run(
            "HcnModifyNetwork",
            record,
            lambda: self.host.modify_network(network_id, json.loads(settings)),
        )

    def _hcn_modify_endpoint(self, handle: int, settings: str, record: Any) -> int:
        endpoint_id = self._object(handle, "Endpoint")
        return self._run(
            "HcnModifyEndpoint",
            record,
            lambda: self.host.modify_endpoint(endpoint_id, json.loads(settings)),
        )

    def _hcn_modify_load_balancer(self, handle: int, settings: str, record: Any) -> int:
        lb_id = self._object(handle, "LoadBalancer")

        def action() -> None:
            self.host.modify_load_balancer(lb_id, json.loads(settings))

        return self._run("HcnModifyLoadBalancer", record, action)

    def _hcn_create_endpoint(
        self, network: int, guid: Any, settings: str, out: Any, record: Any
    ) -> int:
        network_id = self._object(network, "Network")
        if any(bytes(guid.contents)):
            self.errors.append("HcnCreateEndpoint: a non-zero GUID (hcsshim passes zero)")

        def action() -> None:
            created = self.host.create_endpoint(network_id, json.loads(settings))
            out[0] = self._handle("Endpoint", created["ID"])

        return self._run("HcnCreateEndpoint", record, action)

    def _hcn_create_load_balancer(self, guid: Any, settings: str, out: Any, record: Any) -> int:
        def action() -> None:
            created = self.host.create_load_balancer(json.loads(settings))
            out[0] = self._handle("LoadBalancer", created["ID"])

        return self._run("HcnCreateLoadBalancer", record, action)

    def _hcn_delete_endpoint(self, guid: Any, record: Any) -> int:
        object_id = str(uuid.UUID(bytes_le=bytes(guid.contents)))
        return self._run("HcnDeleteEndpoint", record, lambda: self.host.delete_endpoint(object_id))

    def _hcn_delete_load_balancer(self, guid: Any, record: Any) -> int:
        object_id = str(uuid.UUID(bytes_le=bytes(guid.contents)))
        return self._run(
            "HcnDeleteLoadBalancer", record, lambda: self.host.delete_load_balancer(object_id)
        )

    def _hns_call(self, method: str, path: str, request: str | None, response: Any) -> int:
        if (method, path) == ("GET", "/globals/version"):
            version = self.host.version()
            envelope = {"Success": True, "Output": {"Major": version.major, "Minor": version.minor}}
        else:
            envelope = {"Success": False, "Error": f"{method} {path}: not found"}
        response[0] = self._string(json.dumps(envelope))
        return 0

    def _co_task_mem_free(self, pointer: int | None) -> None:
        if pointer and self.strings.pop(pointer, None) is None:
            self.errors.append(f"CoTaskMemFree of memory not allocated by HNS: {pointer:#x}")

    def leaks(self) -> list[str]:
        """Everything the binding failed to give back, and anything it did wrong."""
        return [
            *self.errors,
            *(f"string not freed: {ctypes.wstring_at(a)[:60]!r}" for a in self.strings),
            *(f"handle not closed: {kind} {oid}" for kind, oid in self.handles.values()),
        ]
