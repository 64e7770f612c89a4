"""explain on Windows: the backends it says a VIP reaches are those HNS balances to.

The services scenario of ``test_services_driver.py`` is programmed into a
simulated host by a real driver; the same messages are replayed in memory
and ``explain`` is asked about every cluster IP and port. Its answer comes
from the desired model, the host's from the HNS load balancers the driver
wrote (:mod:`dataplane.windows.sim.lb_verdict`): they must name the same
backends, and a frontend HNS does not balance must be ``no-backends``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from dataplane.core.loop import Dataplane
from dataplane.ops.explain import explain
from dataplane.ops.metrics import Metrics
from dataplane.ops.observer import Observer
from dataplane.sim import SimPlatform
from dataplane.windows.sim.lb_verdict import backend_addresses, service_route
from tests.kernel import scenario as sc
from tests.windows.services_node import messages, overlay_host
from tests.windows.test_services_driver import (
    NODE,
    SERVICES,
    run,
)

pytestmark = pytest.mark.slow

CLIENT = sc.PODS[3].ipv4  # a pod of this node that backs no service


def test_explain_names_the_backends_hns_balances_each_cluster_ip_to(tmp_path: Path) -> None:
    msgs = messages(*SERVICES)
    path = tmp_path / "host.json"
    overlay_host(path=path).flush()
    _, host = run(path, *msgs)
    observer = Observer(SimPlatform(), metrics=Metrics(process=False))
    dataplane = Dataplane(observer.platform, observer=observer)
    for msg in msgs:
        dataplane.send_message(msg)
    dataplane.close_input()
    trio.run(dataplane.run)
    state = observer.platform.publish().state

    compared = 0
    for svc in state.services.values():
        for vip in svc.cluster_ips:
            if ":" in vip:
                continue  # the client is an IPv4 pod
            for port in svc.ports:
                hns = service_route(host, vip, port.protocol, port.port, node_addresses=(NODE,))
                said: dict[str, Any] = explain(
                    state, CLIENT, vip, port.protocol, port.port, platform="windows"
                ).to_json()
                if hns is None:
                    assert said["decided_by"]["rule"] == "no-backends", (vip, port)
                    continue
                expected = {f"{a}:{p}" for a, p in backend_addresses(hns)}
                assert set(said["service"]["backends"]) == expected, (vip, port)
                compared += 1
    assert compared >= 7
