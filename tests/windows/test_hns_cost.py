"""What HNS calls cost on a real host, counted through the fake ``computenetwork.dll``.

Every HCN call here is a real C call into the fake DLL, over a simulated
host in a file that another process (the CNI stand-in, ``testbed.cni``)
changes while the driver runs, as a real node's CNI does. The figures are
the issue's goals: a new pod costs at most five calls from its
``WorkloadEndpointUpdate`` to its ACLs written; a quiet refresh reads only
what can have changed; what is changed behind our back is repaired
within two refresh intervals.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import trio

from dataplane.managers.convert import workload_key
from dataplane.model import EndpointStatus
from dataplane.windows.hns.hcn import writes
from dataplane.windows.hns.hcn_ctypes import HcnBinding
from dataplane.windows.sim.simhost import SimHost
from testbed.hns import calico_host
from tests.conftest import run_trio
from tests.kernel import scenario as sc
from tests.windows.fake_hcn_dll import FakeHcnDll
from tests.windows.services_node import LOCAL_V4, REMOTE_V4, backends, service
from tests.windows.services_node import messages as service_messages
from tests.windows.test_lb_programmer import frontends, remote_endpoints
from tests.windows.windows_node import Model, disagreements, messages, node, send

INTERVAL = 90.0  # Felix's EndpointRefreshInterval default


def _bound(host: SimHost) -> tuple[HcnBinding, FakeHcnDll]:
    dll = FakeHcnDll(host)
    return HcnBinding(dll.bind), dll


def _cni(path: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "testbed.cni", str(path), *args],
        check=True,
        capture_output=True,
        timeout=60,
    )


def test_a_new_pod_costs_five_calls_from_its_update_to_its_acls(tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    calico_host(sc.PODS, path=path)
    binding, dll = _bound(SimHost.load(path))
    extra = sc.endpoint(sc.EXTRA, sc.EXTRA.iface)
    msgs = messages()

    async def main() -> None:
        async with node(binding) as (dp, platform):  # type: ignore[arg-type]
            await send(dp, *msgs)
            assert dp.in_sync and dp.last_apply_error is None
            # After the driver's last listing, the CNI (another process) makes
            # the pod's endpoint; then Felix announces the workload.
            _cni(path, "add", sc.EXTRA.namespace, sc.EXTRA.name, str(sc.EXTRA.index))
            before = Counter(binding.calls)
            await send(dp, extra)
            spent = binding.calls - before
            # Enumerate, then open, query, modify and close the new endpoint.
            assert spent == Counter(
                EnumerateEndpoints=1,
                OpenEndpoint=1,
                QueryEndpointProperties=1,
                ModifyEndpoint=1,
                CloseEndpoint=1,
            )
            assert platform.endpoint_statuses()[workload_key(extra.id)] is EndpointStatus.UP

    run_trio(main)
    assert disagreements(SimHost.load(path).snapshot(), Model.of([*msgs, extra])) == []
    assert dll.leaks() == []


WEB = (service("web"), backends("web", *LOCAL_V4, *REMOTE_V4))


def _services_host(tmp_path: Path) -> tuple[Path, HcnBinding, FakeHcnDll]:
    path = tmp_path / "host.json"
    calico_host(sc.PODS, path=path, network_type="Overlay")
    binding, dll = _bound(SimHost.load(path))
    return path, binding, dll


def test_a_quiet_refresh_reads_only_what_can_have_changed(tmp_path: Path) -> None:
    _, binding, dll = _services_host(tmp_path)

    async def main() -> None:
        async with node(binding) as (dp, _):  # type: ignore[arg-type]
            await send(dp, *service_messages(*WEB))
            assert dp.in_sync and dp.last_apply_error is None
            before = Counter(binding.calls)
            await trio.sleep(INTERVAL + 1)  # one refresh cycle: ten ticks
            spent = binding.calls - before
            assert writes(spent) == Counter()
            assert spent == Counter(
                # Every tick: our network's endpoint ids, the load balancers' ids.
                EnumerateEndpoints=10,
                EnumerateLoadBalancers=10,
                # Once a cycle: the networks (Calico and nat), in full.
                EnumerateNetworks=1,
                OpenNetwork=2,
                QueryNetworkProperties=2,
                CloseNetwork=2,
                # Once a cycle: each endpoint whose ACLs we keep (the six pods);
                # never kube-proxy's or our remote endpoints, nor load balancers.
                OpenEndpoint=len(sc.PODS),
                QueryEndpointProperties=len(sc.PODS),
                CloseEndpoint=len(sc.PODS),
            )

    run_trio(main)
    assert dll.leaks() == []


def test_tampering_is_repaired_within_two_refresh_intervals(tmp_path: Path) -> None:
    path, binding, dll = _services_host(tmp_path)
    msgs = service_messages(*WEB)
    db = next(p for p in sc.PODS if p.name == "db-1")

    async def main() -> None:
        async with node(binding) as (dp, _):  # type: ignore[arg-type]
            await send(dp, *msgs)
            assert dp.in_sync and dp.last_apply_error is None
            host = SimHost.load(path)  # another process's view of the host
            wanted = frontends(host), remote_endpoints(host)
            # Someone else, in their own process, removes an ACL of db-1's, the
            # load balancer and one of our remote endpoints.
            tamper = SimHost.load(path)
            (ep,) = [e for e in tamper.endpoints.values() if e["Name"].endswith("db-1_eth0")]
            acls = [p for p in ep["Policies"] if p["Type"] == "ACL"]
            ep["Policies"] = [p for p in ep["Policies"] if p is not acls[0]]
            tamper.load_balancers.clear()
            (gone,) = [
                i
                for i, e in tamper.endpoints.items()
                if e["IpConfigurations"][0]["IpAddress"] == REMOTE_V4[0]
            ]
            del tamper.endpoints[gone]
            tamper.flush()
            assert SimHost.load(path).load_balancers == {}
            await trio.sleep(2 * INTERVAL)
            repaired = SimHost.load(path)
            assert (frontends(repaired), remote_endpoints(repaired)) == wanted
            (ep,) = [e for e in repaired.endpoints.values() if e["Name"].endswith("db-1_eth0")]
            assert len([p for p in ep["Policies"] if p["Type"] == "ACL"]) == len(acls)

    run_trio(main)
    assert disagreements(SimHost.load(path).snapshot(), Model.of(msgs)) == [], db.name
    assert dll.leaks() == []
