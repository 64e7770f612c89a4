"""object_errors: what the in-memory platforms hold back now, named by object.

The simulated Windows host refuses as HNS does; the sim platform refuses
what its ``refuse_objects`` switch names.
"""

from __future__ import annotations

import trio

from dataplane.core.platform import ObjectError
from dataplane.model import IPSet, IPSetType, Policy, PolicyKey
from dataplane.sim.platform import SimPlatform
from dataplane.windows.sim.simhost import SimHost
from testbed.hns import NETWORK_ID, calico_host
from tests.conftest import run_trio
from tests.kernel import scenario as sc
from tests.windows.services_node import backends, overlay_host, service
from tests.windows.services_node import messages as service_messages
from tests.windows.windows_node import messages, node, send


def _endpoint_id(host: SimHost, pod: str) -> str:
    (found,) = [e["ID"] for e in host.endpoints.values() if e["Name"].endswith(f"{pod}_eth0")]
    return str(found)


def _refused(call: str, target: str) -> str:
    return f"Hcn{call} {target or '-'} failed, HRESULT 0x80004005: injected fault"


def test_a_refused_endpoint_is_named_by_its_key() -> None:
    host = calico_host(sc.PODS)
    db = _endpoint_id(host, "db-1")
    refusing = True
    host.fault = lambda call, target: refusing and call == "ModifyEndpoint" and target == db

    async def main() -> None:
        nonlocal refusing
        async with node(host) as (dp, platform):
            assert platform.object_errors() == []
            await send(dp, *messages())
            assert dp.in_sync
            assert platform.object_errors() == [
                ObjectError(
                    "workload_endpoint",
                    f"k8s/{sc.pod('db-1').workload_id}/eth0",
                    _refused("ModifyEndpoint", db),
                ),
            ]
            refusing = False
            await trio.sleep(600)  # its retry succeeds
            assert platform.object_errors() == []

    run_trio(main)


def test_refused_set_writes_are_named_by_the_sets() -> None:
    host = calico_host(sc.PODS)
    host.fault = lambda call, target: call == "ModifyNetwork" and target == NETWORK_ID

    async def main() -> None:
        async with node(host) as (dp, platform):
            await send(dp, *messages())
            assert dp.in_sync
            # Every set rules can match (a named-port set is no SetPolicy).
            # (HNS then refuses the ACLs of endpoints naming them, too.)
            assert [e for e in platform.object_errors() if e.kind != "workload_endpoint"] == [
                ObjectError("ipset", set_id, _refused("ModifyNetwork", NETWORK_ID))
                for set_id in sorted((sc.SET_API, sc.SET_BLOCK, sc.SET_MON, sc.SET_WEB))
            ]

    run_trio(main)


def test_refused_load_balancers_are_named_by_service() -> None:
    host = overlay_host()
    host.fault = lambda call, target: call == "CreateLoadBalancer"

    async def main() -> None:
        async with node(host) as (dp, platform):
            await send(dp, *service_messages(service("web"), backends("web", sc.PODS[0].ipv4)))
            assert dp.in_sync
            assert platform.object_errors() == [
                ObjectError("service", "prod/web", _refused("CreateLoadBalancer", "")),
            ]

    run_trio(main)


def test_the_sim_platform_refuses_what_its_switch_names() -> None:
    platform = SimPlatform()
    guard = PolicyKey("guard", "backend", "NetworkPolicy")
    platform.refuse_objects = {
        ("policy", str(guard)): "refused by the test",
        ("ipset", "s:web"): "too many members",
        ("route", "10.65.9.0/26"): "not desired: never reported",
    }
    platform.set_policy(guard, Policy(tier="default"))
    platform.set_policy(PolicyKey("other"), Policy(tier="default"))
    platform.replace_ipset(IPSet("s:web", IPSetType.IP, frozenset({"10.0.0.1"})))
    assert platform.object_errors() == []
    run_trio(platform.apply)
    assert platform.object_errors() == [
        ObjectError("ipset", "s:web", "too many members"),
        ObjectError("policy", "NetworkPolicy:backend/guard", "refused by the test"),
    ]
    # Kept out of what is programmed; desired keeps them, for the next apply.
    assert set(platform.programmed.policies) == {PolicyKey("other")}
    assert platform.programmed.ipsets == {}
    assert set(platform.desired.ipsets) == {"s:web"}
    platform.refuse_objects.clear()
    run_trio(platform.apply)
    assert platform.object_errors() == []
    assert set(platform.programmed.policies) == {guard, PolicyKey("other")}
