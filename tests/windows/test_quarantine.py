"""What HNS refuses is set aside, never stalls the node and never opens it up.

HNS can refuse one object for good (a policy it will not take, an endpoint
in a bad state). The Windows programmers quarantine that object, write
everything else and let the apply succeed, so the node reaches
DataplaneInSync and reports statuses; the refused object is retried alone
with backoff and reports ``error``.
"""

from __future__ import annotations

import logging
from collections import Counter

import pytest
import trio

from dataplane.model import EndpointStatus
from dataplane.windows.sim.simhost import SimHost
from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.hns import calico_host
from tests.conftest import run_trio
from tests.kernel import scenario as sc
from tests.windows.windows_node import Model, disagreements, messages, node, send


def _hns_id(host: SimHost, pod: str) -> str:
    (found,) = [e["ID"] for e in host.endpoints.values() if e["Name"].endswith(f"{pod}_eth0")]
    return str(found)


def _key(pod: str) -> str:
    return f"k8s/{sc.pod(pod).workload_id}/eth0"


def test_an_endpoint_hns_refuses_is_retried_alone_and_keeps_its_last_good_acls(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host = calico_host(sc.PODS)
    msgs = messages()
    db = _hns_id(host, "db-1")
    refusing = False
    host.fault = lambda call, target: refusing and call == "ModifyEndpoint" and target == db
    changed = pb.ActivePolicyUpdate(
        id=sc.API_TO_DB,
        policy=pb.Policy(tier="default", namespace="backend", inbound_rules=[]),
    )

    async def main() -> None:
        nonlocal refusing
        async with node(host) as (dp, platform):
            await send(dp, *msgs)
            programmed = host.snapshot()
            refusing = True
            caplog.clear()
            before = Counter(host.calls)
            await send(dp, changed)
            assert dp.last_apply_error is None and dp.in_sync
            statuses = platform.endpoint_statuses()
            assert {str(k) for k, s in statuses.items() if s is EndpointStatus.ERROR} == {
                _key("db-1")
            }
            refusals = [r for r in caplog.records if r.levelno == logging.ERROR]
            assert len(refusals) == 1
            assert "db-1" in refusals[0].getMessage()
            assert "keeps the ACLs it holds" in refusals[0].getMessage()
            assert [what for what, _ in platform.quarantined()] == [f"workload {_key('db-1')}"]
            # db-1 still holds what it held: the old policy, not an open door.
            assert disagreements(host.snapshot(), Model.of(msgs)) == disagreements(
                programmed, Model.of(msgs)
            )
            # Ten minutes of refusals: retried with backoff (1 s doubling to
            # 5 min), not at every wake-up, and logged once.
            await trio.sleep(600)
            tries = host.calls["ModifyEndpoint"] - before["ModifyEndpoint"]
            assert 5 <= tries <= 12, tries
            assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
            assert "refused" in platform.dump()
            refusing = False
            await trio.sleep(301)
            assert platform.quarantined() == []
            assert set(platform.endpoint_statuses().values()) == {EndpointStatus.UP}

    run_trio(main)
    assert disagreements(host.snapshot(), Model.of([*msgs, changed])) == []


def test_refused_sets_fail_the_endpoints_that_name_them_closed_never_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """HNS 15.4 refuses every set write: endpoints whose ACLs name a set cannot
    take them (HNS refuses an ACL naming a set it does not hold), and as they
    hold no ACL yet they would be open; they get the fail-closed list."""
    host = calico_host(sc.PODS)
    refusing = True
    host.fault = lambda call, target: refusing and call == "ModifyNetwork"
    msgs = messages()

    async def main() -> None:
        nonlocal refusing
        async with node(host) as (dp, platform):
            await send(dp, *msgs)
            assert dp.last_apply_error is None and dp.in_sync
            quarantined = [what for what, _ in platform.quarantined()]
            assert any(w.startswith("network ") for w in quarantined)
            statuses = platform.endpoint_statuses()
            assert EndpointStatus.ERROR in statuses.values()
            # Whatever is refused drops; nothing the policy denies gets through.
            assert disagreements(host.snapshot(), Model.of(msgs), openings_only=True) == []
            closed = [r for r in caplog.records if "fails closed (all but" in r.getMessage()]
            assert closed, "no endpoint needed the fail-closed list"
            refusing = False
            await trio.sleep(600)
            assert platform.quarantined() == []
            assert set(platform.endpoint_statuses().values()) == {EndpointStatus.UP}

    run_trio(main)
    assert disagreements(host.snapshot(), Model.of(msgs)) == []
