"""Conntrack cleanup: the pure plan, and the cleaner on the fake and the kernel.

The contract tests take ``tool``: once :class:`FakeConntrack`, once the real
``conntrack`` inside a fresh network namespace (skipped unless root). Both
are seeded with ``conntrack -I`` and read back with ``conntrack -L``, so the
fake is held to what the kernel does with the deletions the cleaner plans.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataplane.linux.kernel.cmd import CommandRunner, ProcessRunner
from dataplane.linux.kernel.conntrack import ConntrackCleaner, ConntrackDeletion, plan_deletions
from dataplane.model.services import (
    Backend,
    BackendPort,
    BackendState,
    Service,
    ServiceKey,
    ServicePort,
)
from tests.conftest import run_trio
from tests.linux.fake_conntrack import FakeConntrack

KEY = ServiceKey("default", "dns")
VIP, VIP6 = "10.96.0.10", "fd00:96::10"


def backend(address: str, port: int = 5353, **kw: object) -> Backend:
    return Backend(address, (BackendPort("dns", "udp", port),), **kw)  # type: ignore[arg-type]


def dns(*backends: Backend, protocol: str = "udp", node_port: int = 0) -> Service:
    return Service(
        KEY,
        type="NodePort" if node_port else "ClusterIP",
        cluster_ips=(VIP, VIP6),
        ports=(ServicePort("dns", protocol, 53, node_port),),
        backends=tuple(
            Backend(b.address, tuple(BackendPort(p.name, protocol, p.port) for p in b.ports))
            if protocol != "udp"
            else b
            for b in backends
        ),
    )


# --- plan_deletions: pure -----------------------------------------------------


def test_removed_backend_deletes_only_its_flows() -> None:
    old = dns(backend("10.0.1.5"), backend("10.0.1.6"))
    new = dns(backend("10.0.1.6"))
    assert plan_deletions(old, new) == (ConntrackDeletion(4, "udp", 53, VIP, "10.0.1.5", 5353),)


def test_first_backend_deletes_every_flow_to_the_frontend() -> None:
    # Entries made while the service had no backend never got DNATed
    # (kube-proxy's "stale entry to a black hole" case).
    plan = plan_deletions(dns(), dns(backend("10.0.1.5"), backend("fd00:1::5")))
    assert plan == (
        ConntrackDeletion(4, "udp", 53, VIP),
        ConntrackDeletion(6, "udp", 53, VIP6),
    )


def test_service_created_with_backends_counts_as_first_backend() -> None:
    assert plan_deletions(None, dns(backend("10.0.1.5"))) == (ConntrackDeletion(4, "udp", 53, VIP),)


def test_tcp_is_left_to_the_clients() -> None:
    old = dns(backend("10.0.1.5"), protocol="tcp")
    assert plan_deletions(old, None) == ()
    assert plan_deletions(dns(protocol="tcp"), old) == ()


def test_node_port_and_quarantine_and_port_change() -> None:
    old = dns(backend("10.0.1.5"), backend("10.0.1.6"), node_port=30053)
    quarantined = Backend(
        "10.0.1.5", (BackendPort("dns", "udp", 5353),), state=BackendState.QUARANTINED
    )
    new = dns(quarantined, backend("10.0.1.6", port=5454), node_port=30053)
    plan = plan_deletions(old, new, families=(4,))
    assert set(plan) == {
        ConntrackDeletion(4, "udp", 53, VIP, "10.0.1.5", 5353),
        ConntrackDeletion(4, "udp", 53, VIP, "10.0.1.6", 5353),
        ConntrackDeletion(4, "udp", 30053, None, "10.0.1.5", 5353),
        ConntrackDeletion(4, "udp", 30053, None, "10.0.1.6", 5353),
    }


def test_terminating_backend_keeps_its_flows() -> None:
    terminating = Backend(
        "10.0.1.5", (BackendPort("dns", "udp", 5353),), state=BackendState.TERMINATING
    )
    assert plan_deletions(dns(backend("10.0.1.5")), dns(terminating)) == ()


def test_families_the_node_does_not_program_are_skipped() -> None:
    old = dns(backend("10.0.1.5"), backend("fd00:1::5"))
    assert plan_deletions(old, dns(), families=(4,)) == (
        ConntrackDeletion(4, "udp", 53, VIP, "10.0.1.5", 5353),
    )


addresses = st.sampled_from(["10.0.1.5", "10.0.1.6", "10.0.1.7", "fd00:1::5"])
services = st.one_of(
    st.none(),
    st.builds(
        lambda backs, proto: dns(*(backend(a) for a in sorted(backs)), protocol=proto),
        st.sets(addresses, max_size=4),
        st.sampled_from(["udp", "sctp", "tcp"]),
    ),
)


@given(services, services)
def test_plan_properties(old: Service | None, new: Service | None) -> None:
    plan = plan_deletions(old, new)
    assert plan == plan_deletions(old, new)  # deterministic, sorted
    assert len(set(plan)) == len(plan)
    if old == new:
        assert plan == ()
    for deletion in plan:
        assert deletion.protocol in {"udp", "sctp"}
        # Never the flows of a backend that still serves the same frontend.
        if new is not None and deletion.backend is not None:
            assert deletion.backend not in {b.address for b in new.backends} or (
                new.ports[0].protocol != deletion.protocol
            )


# --- the cleaner: fake and kernel -------------------------------------------


@pytest.fixture(params=["fake", "kernel"])
def tool(request: pytest.FixtureRequest) -> Iterator[CommandRunner]:
    if request.param == "fake":
        yield FakeConntrack()
        return
    if os.geteuid() != 0 or shutil.which("conntrack") is None:
        pytest.skip("needs root and conntrack")
    name = f"dpct{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield ProcessRunner(name)
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def flow(client: str, sport: int, dst: str, backend: str) -> list[str]:
    """A UDP flow from ``client`` to ``dst``:53, DNATed to ``backend``:5353."""
    dport, bport = 53, 5353
    return [
        "conntrack",
        "-I",
        "-p",
        "udp",
        "-s",
        client,
        "-d",
        dst,
        "--sport",
        str(sport),
        "--dport",
        str(dport),
        "-r",
        backend,
        "-q",
        client,
        "--reply-port-src",
        str(bport),
        "--reply-port-dst",
        str(sport),
        "-t",
        "300",
    ]


async def listed(tool: CommandRunner) -> set[tuple[str, str]]:
    """(original destination, reply source) of every entry, both families."""
    out = set()
    for family in ("ipv4", "ipv6"):
        result = await tool.run(["conntrack", "-L", "-f", family], check=False)
        for line in result.stdout.decode().splitlines():
            fields = [f.split("=", 1)[1] for f in line.split() if f.startswith(("src=", "dst="))]
            out.add((fields[1], fields[2]))  # orig dst, reply src
    return out


def test_cleaner_deletes_after_apply_only_what_was_planned(tool: CommandRunner) -> None:
    async def main() -> None:
        for argv in (
            flow("10.0.0.1", 4000, VIP, "10.0.1.5"),  # to the removed backend
            flow("10.0.0.1", 4001, VIP, "10.0.1.6"),  # to the one that stays
            flow("10.0.0.1", 4002, "10.96.0.11", "10.0.1.5"),  # another service
            flow("fd00::1", 4000, VIP6, "fd00:1::5"),  # v6 one that stays
        ):
            await tool.run(argv)
        cleaner = ConntrackCleaner(tool)
        families = (4, 6)
        # A restart adopts the node: the first apply plans nothing.
        old = dns(backend("10.0.1.5"), backend("10.0.1.6"), backend("fd00:1::5"))
        cleaner.observe(KEY, old, families)
        assert len(cleaner.pending) == 0
        await cleaner.apply()
        cleaner.observe(KEY, dns(backend("10.0.1.6"), backend("fd00:1::5")), families)
        assert list(cleaner.pending) == [ConntrackDeletion(4, "udp", 53, VIP, "10.0.1.5", 5353)]
        await cleaner.apply()
        assert cleaner.pending == ()
        assert await listed(tool) == {
            (VIP, "10.0.1.6"),
            ("10.96.0.11", "10.0.1.5"),
            (VIP6, "fd00:1::5"),
        }
        # Removing the service takes its remaining flows, both families.
        cleaner.observe(KEY, None, families)
        await cleaner.apply()
        assert await listed(tool) == {("10.96.0.11", "10.0.1.5")}

    run_trio(main)


def test_nothing_to_delete_is_success(
    tool: CommandRunner, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        cleaner = ConntrackCleaner(tool)
        await cleaner.apply()
        cleaner.observe(KEY, dns(backend("10.0.1.5")), (4, 6))
        cleaner.observe(KEY, dns(), (4, 6))
        await cleaner.apply()

    with caplog.at_level(logging.WARNING):
        run_trio(main)
    assert caplog.records == []


def test_a_failed_deletion_is_logged_and_dropped(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeConntrack()
    fake.fail_deletes = 1

    async def main() -> None:
        cleaner = ConntrackCleaner(fake)
        await cleaner.apply()
        cleaner.observe(KEY, dns(backend("10.0.1.5")), (4,))
        cleaner.observe(KEY, dns(), (4,))
        await cleaner.apply()  # must not raise: the rules are right
        assert cleaner.pending == ()
        fake.missing = True
        cleaner.observe(KEY, dns(backend("10.0.1.6")), (4,))
        await cleaner.apply()

    with caplog.at_level(logging.WARNING):
        run_trio(main)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "exit 1" in messages[0] and VIP in messages[0]
    assert "No such file" in messages[1]


def test_changes_between_applies_are_all_run_once() -> None:
    fake = FakeConntrack()

    async def main() -> None:
        cleaner = ConntrackCleaner(fake)
        await cleaner.apply()
        many = [backend(f"10.0.2.{i}") for i in range(1, 40)]
        cleaner.observe(KEY, dns(*many), (4,))  # first backends: the whole frontend
        cleaner.observe(KEY, dns(), (4,))  # then each backend's flows
        cleaner.observe(KEY, dns(), (4,))  # no change: nothing more
        await cleaner.apply()
        assert fake.deletes == 1 + 39
        await cleaner.apply()
        assert fake.deletes == 40

    run_trio(main)
