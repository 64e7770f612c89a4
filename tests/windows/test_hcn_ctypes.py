"""The computenetwork.dll binding, through real C calls into a fake DLL.

The fake (``fake_hcn_dll.py``) checks each bound function against
Microsoft's documented signature, hands out real string allocations and
handles, and records any that are not given back. Over it, the binding must
behave as the simulated host it wraps: the same platform tests pass on it.
"""

from __future__ import annotations

import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
import trio

from dataplane.cli import platforms
from dataplane.cli.parser import build
from dataplane.errors import PlatformUnavailableError
from dataplane.windows.hns import hcn_ctypes
from dataplane.windows.hns.hcn import E_NOTIMPL, HCN_E_ENDPOINT_NOT_FOUND, HcnError, HnsVersion
from dataplane.windows.hns.hcn_ctypes import GUID, HcnBinding
from dataplane.windows.platform import WindowsPlatform
from dataplane.windows.sim.simhost import SimHost
from testbed.hns import NETWORK_ID, calico_host
from tests.conftest import run_trio
from tests.kernel import scenario as sc
from tests.windows.fake_hcn_dll import FakeHcnDll
from tests.windows.windows_node import Model, disagreements, messages, node, send


def _bound(host: SimHost, **options: frozenset[str]) -> tuple[HcnBinding, FakeHcnDll]:
    dll = FakeHcnDll(host, **options)
    return HcnBinding(dll.bind), dll


def test_every_function_is_bound_as_microsoft_documents_it() -> None:
    binding, dll = _bound(calico_host(sc.PODS))
    for name in hcn_ctypes.SIGNATURES:
        binding._function(name)  # the fake raises if the types differ
    assert dll.leaks() == []


def test_a_wrong_signature_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = dict(hcn_ctypes.SIGNATURES)
    library, result, args = wrong["HcnCreateEndpoint"]
    wrong["HcnCreateEndpoint"] = (library, result, (args[1], args[0], *args[2:]))
    monkeypatch.setattr(hcn_ctypes, "SIGNATURES", wrong)
    binding, _ = _bound(calico_host(sc.PODS))
    with pytest.raises(AssertionError, match="HcnCreateEndpoint"):
        binding._function("HcnCreateEndpoint")


def test_guids_are_laid_out_as_windows_does() -> None:
    value = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    guid = GUID.of(value)
    assert (guid.Data1, guid.Data2, guid.Data3) == (0x00112233, 0x4455, 0x6677)
    assert bytes(guid.Data4) == bytes.fromhex("8899aabbccddeeff")
    assert bytes(guid) == value.bytes_le


def test_the_platform_on_the_binding_programs_what_it_does_on_the_simulated_host() -> None:
    host = calico_host(sc.PODS)
    binding, dll = _bound(host)
    msgs = messages()

    async def main() -> None:
        async with node(binding) as (dp, platform):  # type: ignore[arg-type]
            await send(dp, *msgs)
            assert dp.last_apply_error is None and dp.in_sync
            assert platform.version == HnsVersion(15, 4)

    run_trio(main)
    assert disagreements(host.snapshot(), Model.of(msgs)) == []
    assert dll.leaks() == []
    # The simulated host alone, given the same messages, counts exactly the
    # C calls the binding made: every figure measured on it is a real host's.
    alone = calico_host(sc.PODS)

    async def on_the_simulated_host() -> None:
        async with node(alone) as (dp, _):
            await send(dp, *msgs)

    run_trio(on_the_simulated_host)
    assert binding.calls == alone.calls
    # Each endpoint of our network opened once (the pods' and kube-proxy's
    # remote one; the NAT network's never), each pod's ACLs written through
    # the handle that read it.
    assert binding.calls["OpenEndpoint"] == len(sc.PODS) + 1 < len(host.endpoints)
    assert binding.calls["ModifyEndpoint"] == len(sc.PODS)

    # A restart against the same host adopts what is there: no modify call.
    binding, dll = _bound(host)

    async def restart() -> None:
        async with node(binding) as (dp, _):  # type: ignore[arg-type]
            await send(dp, *msgs)
            await trio.sleep(1)

    run_trio(restart)
    assert binding.calls["ModifyEndpoint"] == binding.calls["ModifyNetwork"] == 0
    assert dll.leaks() == []


def test_failures_carry_the_hresult_and_the_error_record_and_free_both() -> None:
    host = calico_host(sc.PODS)
    binding, dll = _bound(host)
    gone = str(uuid.uuid4())
    with pytest.raises(HcnError) as caught:
        binding.modify_endpoint(gone, {"ResourceType": "Policy", "RequestType": "Update"})
    assert caught.value.hresult == HCN_E_ENDPOINT_NOT_FOUND and caught.value.not_found
    assert "not found" in caught.value.record
    endpoint = next(iter(host.endpoints))
    bad = {"ResourceType": "Policy", "RequestType": "Update", "Settings": {"Policies": [{}]}}
    with pytest.raises(HcnError, match="policy type"):
        binding.modify_endpoint(endpoint, bad)
    # S_OK with an error record is a failure too (hcsshim's rule).
    dll.record_only.add("HcnModifyNetwork")
    with pytest.raises(HcnError, match="refused"):
        binding.modify_network(
            NETWORK_ID, {**bad, "RequestType": "Add", "Settings": {"Policies": []}}
        )
    with pytest.raises(HcnError, match="not a GUID"):
        binding.delete_endpoint("not-a-guid")
    assert dll.leaks() == []


def test_endpoints_and_load_balancers_round_trip() -> None:
    host = calico_host([])
    binding, dll = _bound(host)
    remote = {
        "Name": "x",
        "IpConfigurations": [{"IpAddress": "10.65.9.10"}],  # 10.65.9.9 is the host's remote
        "MacAddress": "02-11-0a-41-09-0a",
        "Flags": 1,
    }
    created = binding.create_endpoint(NETWORK_ID, remote)
    assert created["HostComputeNetwork"] == NETWORK_ID.upper()
    assert any(e["ID"] == created["ID"] for e in binding.list_endpoints())
    lb = {
        "HostComputeEndpoints": [created["ID"]],
        "FrontendVIPs": ["10.96.0.10"],
        "PortMappings": [{"Protocol": 6, "InternalPort": 80, "ExternalPort": 80}],
    }
    made = binding.create_load_balancer(lb)
    changed = binding.modify_load_balancer(made["ID"], {**lb, "FrontendVIPs": ["10.96.0.11"]})
    assert changed["FrontendVIPs"] == ["10.96.0.11"]
    assert [x["ID"] for x in binding.list_load_balancers()] == [made["ID"]]
    binding.delete_load_balancer(made["ID"])
    binding.delete_endpoint(created["ID"])
    assert binding.list_load_balancers() == [] and created["ID"] not in host.endpoints
    assert dll.leaks() == []
    assert Counter(binding.calls)["CreateEndpoint"] == 1


def test_an_export_an_older_host_lacks_is_not_implemented() -> None:
    binding, dll = _bound(calico_host([]), missing=frozenset({"HcnModifyLoadBalancer"}))
    with pytest.raises(HcnError) as caught:
        binding._function("HcnModifyLoadBalancer")
    assert caught.value.hresult == E_NOTIMPL
    assert dll.leaks() == []


def test_off_windows_the_binding_says_it_needs_windows() -> None:
    with pytest.raises(PlatformUnavailableError, match="needs Windows"):
        HcnBinding.load()


def test_on_windows_the_cli_reaches_hns_through_the_binding(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    host = calico_host(sc.PODS)
    dll = FakeHcnDll(host)
    monkeypatch.setattr(sys, "platform", "win32")
    # The load balancers' state goes under %ProgramData%: here, not into a
    # "C:" directory beside the tests.
    monkeypatch.setenv("PROGRAMDATA", str(tmp_path))
    monkeypatch.setattr(hcn_ctypes, "_windows_bind", lambda: dll.bind)
    args = build({}).parse_args(["--platform", "windows", "--host-address", "10.0.0.1"])
    platform = platforms.platform("windows", args)
    assert isinstance(platform, WindowsPlatform)
    assert isinstance(platform.hcn, HcnBinding)
    assert platform.hcn.version() == HnsVersion(15, 4)
    assert dll.leaks() == []
