"""Faults at random while 500 services sync: once they stop, HNS holds exactly what is wanted.

Two kinds of fault, as a real host shows them: a call refused before it
does anything (the simulated host's ``fault``), and a call that does its
work but reports failure (a timeout after the fact, :class:`LateFaults`).
The second is what makes naive drivers create duplicates. After the faults
stop and the backoff and refresh run their course, the host must hold one
load balancer per wanted frontend, equal to a fault-free run's, the
remote endpoints those need and nothing else of ours, and the state file
must name exactly our load balancers.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import trio
from google.protobuf.message import Message

from dataplane.windows.hns.hcn import E_FAIL, HcnError, Json
from dataplane.windows.services.lb_state import OwnedIds
from dataplane.windows.sim.simhost import SimHost
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.conftest import run_trio
from tests.windows.services_node import LOCAL_V4, backends, messages, overlay_host, service
from tests.windows.windows_node import node, send

_WRITES = (
    "create_load_balancer",
    "modify_load_balancer",
    "delete_load_balancer",
    "create_endpoint",
    "delete_endpoint",
)


class LateFaults:
    """The host, but some writes fail *after* taking effect (as a timed-out call can)."""

    def __init__(self, host: SimHost, rng: random.Random) -> None:
        self.host = host
        self.rng = rng
        self.rate = 0.0

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.host, name)
        if name not in _WRITES:
            return real

        def call(*args: Any) -> Any:
            result = real(*args)
            if self.rng.random() < self.rate:
                raise HcnError(name, "", E_FAIL, "timed out after the fact")
            return result

        return call


def _services(rng: random.Random, count: int) -> list[Message]:
    remote = [f"10.65.{2 + i // 200}.{i % 200 + 1}" for i in range(400)]
    out: list[Message] = []
    for i in range(count):
        out.append(service(f"svc-{i}", cluster_ips=[f"10.96.{i // 250}.{i % 250 + 1}"]))
        chosen = rng.sample(LOCAL_V4, 2) + rng.sample(remote, 3)
        out.append(backends(f"svc-{i}", *chosen))
    return out


def _changes(rng: random.Random, count: int) -> list[Message]:
    out: list[Message] = []
    for i in rng.sample(range(count), 60):
        if i % 3 == 0:
            out.append(pb.ServiceRemove(name=f"svc-{i}", namespace="prod"))
        else:
            out.append(backends(f"svc-{i}", rng.choice(LOCAL_V4), f"10.65.9.{i % 250 + 1}"))
    return out


def _ours(host: SimHost) -> tuple[list[Json], list[Json]]:
    """Our load balancers (ids left out, backends by address) and our remote endpoints."""
    address = {i: e["IpConfigurations"][0]["IpAddress"] for i, e in host.endpoints.items()}
    lbs = sorted(
        json.dumps(
            {k: v for k, v in lb.items() if k != "ID"}
            | {"HostComputeEndpoints": sorted(address[e] for e in lb["HostComputeEndpoints"])},
            sort_keys=True,
        )
        for lb in host.load_balancers.values()
    )
    remotes = sorted(
        json.dumps(ep, sort_keys=True)
        for ep in host.endpoints.values()
        if str(ep.get("Name", "")).startswith("dataplane-remote-")
    )
    return [json.loads(x) for x in lbs], [json.loads(x) for x in remotes]


def _run(
    host: SimHost,
    state: Path,
    msgs: list[Message],
    changes: list[Message],
    rng: random.Random | None,
) -> None:
    late = LateFaults(host, rng or random.Random(0))

    async def main() -> None:
        async with node(late, owned_load_balancers=OwnedIds(state)) as (dp, _):  # type: ignore[arg-type]
            if rng is not None:
                late.rate = 0.05
                host.fault = lambda name, target: rng.random() < 0.05
            await send(dp, *msgs)
            await trio.sleep(30)
            await send(dp, *changes)
            await trio.sleep(30)
            late.rate, host.fault = 0.0, None  # the faults stop
            await trio.sleep(700)  # past the longest backoff (300 s) and a refresh
            await send(dp)

    run_trio(main)


def test_random_faults_during_a_500_service_sync_converge_without_duplicates_or_leaks(
    tmp_path: Path,
) -> None:
    rng = random.Random(11)
    services = _services(rng, 500)
    changes = _changes(rng, 500)
    msgs = messages(*services)

    clean = overlay_host()
    _run(clean, tmp_path / "clean.json", msgs, changes, None)
    faulty = overlay_host()
    _run(faulty, tmp_path / "faulty.json", msgs, changes, rng)

    assert faulty.calls["CreateLoadBalancer"] > clean.calls["CreateLoadBalancer"]  # faults hit
    assert _ours(faulty) == _ours(clean)
    owned = set(json.loads((tmp_path / "faulty.json").read_text())["LoadBalancers"])
    assert owned == set(faulty.load_balancers)
    frontends = [lb["FrontendVIPs"][0] for lb in faulty.load_balancers.values()]
    removed = sum(isinstance(m, pb.ServiceRemove) for m in changes)
    assert len(frontends) == len(set(frontends)) == 500 - removed
