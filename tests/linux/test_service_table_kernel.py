"""The services table against the kernel's own parser and its sets, for drawn inputs.

Every table the layout can make (either family, any table name nft can
read, any mark bit, any pools) passes ``nft --check``; names nft cannot
read are refused before a script exists. Drawn sequences of service
changes (the strategy of ``test_service_layout``) are written by the real
writer into a throwaway namespace and by the same programmer into the
kernel-like fake: the kernel then holds, set by set, as many elements as
the fake, and the fake what the services add up to. So the fake the unit
tests trust keeps sets as the kernel does, and the kernel takes every
element the layout makes.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataplane.linux.kernel.cmd import ProcessRunner
from dataplane.linux.kernel.netns import socket_in
from dataplane.linux.nftables.elements import ElementWriter, netfilter_socket
from dataplane.linux.nftables.reader import TableReader
from dataplane.linux.nftables.service_layout import ServiceLayout
from dataplane.linux.nftables.service_table import ServiceTable
from dataplane.model.services import Backend, BackendPort, Service, ServiceKey, ServicePort
from tests.linux.test_service_layout import LAYOUT, FakeSets, Nft, steps, wanted

pytestmark = pytest.mark.skipif(shutil.which("nft") is None, reason="needs nft (nftables)")

_NAMES = itertools.count()
names = st.from_regex(r"[A-Za-z_.][A-Za-z0-9_.-]{0,30}", fullmatch=True)


def _check(netns: str, script: str) -> subprocess.CompletedProcess[str]:
    argv = ["ip", "netns", "exec", netns, "nft", "--check", "-f", "-"]
    return subprocess.run(argv, input=script, capture_output=True, text=True, check=False)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    version=st.sampled_from([4, 6]),
    table=st.one_of(names, st.text(max_size=12)),
    bit=st.integers(min_value=0, max_value=31),
    pools=st.lists(st.integers(min_value=0, max_value=255), max_size=4),
    timeouts=st.lists(st.integers(min_value=1, max_value=86400), max_size=3),
)
def test_every_table_the_layout_makes_passes_nft_check(  # noqa: PLR0917 (hypothesis)
    module_netns: str, version: int, table: str, bit: int, pools: list[int], timeouts: list[int]
) -> None:
    """A name nft cannot read (a space, a quote, a brace, a newline...) is
    refused before a script exists; every other table is valid nft."""
    try:
        layout = ServiceLayout(version, table, 1 << bit)
    except ValueError:
        return
    prefixes = [f"10.{p}.0.0/16" if version == 4 else f"fd00:{p:x}::/64" for p in pools]
    done = _check(module_netns, layout.structure(prefixes, timeouts))
    assert done.returncode == 0, done.stderr


def _counts(netns: str, family: str, table: str) -> dict[str, int]:
    listed = subprocess.run(
        ["ip", "netns", "exec", netns, "nft", "-j", "list", "table", family, table],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    out = {}
    for item in json.loads(listed)["nftables"]:
        found = item.get("set") or item.get("map")
        if found and found.get("elem") and found["name"] != "pools":
            out[found["name"]] = len(found["elem"])
    return out


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.sampled_from([4, 6]), steps, st.integers(1, 40))
def test_the_kernel_holds_what_the_fake_holds_after_any_changes(
    module_netns: str, version: int, script: list[Service | str], piece: int
) -> None:
    """The first write into no table lands in pieces of ``piece``
    elements, several in flight at once."""
    table = f"svc-{next(_NAMES)}"
    layout = ServiceLayout(version, table, LAYOUT.masq_mark)
    writer = ElementWriter(lambda: socket_in(module_netns, netfilter_socket))
    reader = TableReader(lambda: socket_in(module_netns, netfilter_socket))
    real = ServiceTable(layout, ProcessRunner(module_netns), writer, reader)
    real.piece = piece
    fake_sets = FakeSets()
    fake = ServiceTable(layout, Nft(), fake_sets, fake_sets)
    services: dict[str, Service] = {}

    async def apply() -> None:
        await real.apply()
        await fake.apply()

    try:
        for step in [*script, "apply"]:
            if isinstance(step, Service):
                services[step.key.name] = step
                real.set_service(step)
                fake.set_service(step)
            elif step == "apply":
                trio.run(apply)
                held = {n: len(e) for n, e in fake_sets.contents().items()}
                assert _counts(module_netns, layout.family, table) == held
                wants = wanted(services, layout)
                assert fake_sets.contents() == {n: e for n, e in wants.items() if e}
            elif step != "refuse":
                services.pop(step, None)
                real.remove_service(ServiceKey("prod", step))
                fake.remove_service(ServiceKey("prod", step))
    finally:
        trio.run(real.cleanup)


def test_a_table_of_another_layout_is_replaced_whole(netns: str) -> None:
    """An upgrade may find our table with a set of another type: nft will
    not re-declare it, so the table is replaced and every element written."""
    subprocess.run(
        ["ip", "netns", "exec", netns, "nft", "-f", "-"],
        input="add table ip cali-svc\nadd set ip cali-svc fe { type ipv4_addr; }\n"
        "add element ip cali-svc fe { 10.0.0.1 }\n",
        text=True,
        check=True,
    )
    writer = ElementWriter(lambda: socket_in(netns, netfilter_socket))
    reader = TableReader(lambda: socket_in(netns, netfilter_socket))
    table = ServiceTable(ServiceLayout(4, "cali-svc", 1), ProcessRunner(netns), writer, reader)
    web = Service(
        ServiceKey("prod", "web"),
        cluster_ips=("10.96.0.10",),
        ports=(ServicePort("http", "tcp", 80),),
        backends=(Backend("10.65.0.1", (BackendPort("http", "tcp", 8080),)),),
    )
    table.set_service(web)
    trio.run(table.apply)
    assert _counts(netns, "ip", "cali-svc") == {
        "fe": 1,
        "fe_1": 1,
        "addr": 1,
        "port": 1,
        "remote": 1,
    }
    listed = subprocess.run(
        ["ip", "netns", "exec", netns, "nft", "list", "set", "ip", "cali-svc", "fe"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "10.96.0.10 . tcp . 80" in listed and "10.0.0.1" not in listed
    table.set_service(web)  # nothing changed: nothing written
    writes = table.element_writes
    trio.run(table.apply)
    assert table.element_writes == writes and table.structure_writes == 1
