"""The Linux platform, whole, on fakes of the kernel's tools and netlink: no root needed.

The demo node's log (``examples/demo-node.log``) is replayed through the
loop into a :class:`LinuxPlatform` whose command runner answers
``iptables-*``, ``ipset`` and ``conntrack`` from the fakes the contract
suites hold to the real tools, whose netlink is :class:`FakeNetlink` (the
pods' interfaces, a routing table) and whose sysctls are files in a
temporary directory. What the platform programs is then read back from
the fakes: every chain it wants is there as it wants it, hooked from the
built-in chains; each pod's addresses route to its interface; its IP sets
hold their members. A second platform (a restart) onto the same fakes
adopts it all and writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import trio
import trio.testing

from dataplane.core.loop import Dataplane
from dataplane.linux.iptables.chains import parse_save, rule_hashes
from dataplane.linux.kernel.cmd import CommandResult, CommandRunner
from dataplane.linux.platform import LinuxPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.msglog import read_log
from examples.demo_node import LOG_PATH, PODS, SCALE_UP
from tests.linux.fake_conntrack import FakeConntrack
from tests.linux.fake_ipset import FakeIPSet
from tests.linux.fake_iptables import FakeIptables
from tests.linux.fake_netlink import FakeNetlink
from tests.linux.fake_tc import FakeTrafficControl


class FakeTools:
    """One command runner over the three fakes, by the tool's name."""

    def __init__(self) -> None:
        self.iptables = FakeIptables()
        self.ipset = FakeIPSet()
        self.conntrack = FakeConntrack()
        self.tc = FakeTrafficControl()

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        tool = argv[0].rsplit("/", 1)[-1]
        fake: CommandRunner = self.iptables
        if tool == "ipset":
            fake = self.ipset
        elif tool == "conntrack":
            fake = self.conntrack
        elif tool in {"ip", "tc"}:
            fake = self.tc
        return await fake.run(argv, stdin=stdin, check=check)


def demo_log() -> list[pb.ToDataplane]:
    """The demo's messages, the backend named (detection would look for the tools)."""
    envelopes = read_log(LOG_PATH)
    for envelope in envelopes:
        if envelope.HasField("config_update"):
            envelope.config_update.config["IptablesBackend"] = "NFT"
    return envelopes


def replay(platform: LinuxPlatform) -> Dataplane:
    """The demo's messages through the loop into ``platform``, to the end of input."""
    dataplane = Dataplane(platform)
    for envelope in demo_log():
        dataplane.send_message(envelope)
    dataplane.close_input()
    trio.run(dataplane.run)
    return dataplane


def program(tools: FakeTools, netlink: FakeNetlink, sysctls: Path) -> LinuxPlatform:
    platform = LinuxPlatform(
        runner=tools, netlink=netlink, netlink_writer=netlink.write, sysctl_root=str(sysctls)
    )
    replay(platform)
    return platform


def pods_node() -> FakeNetlink:
    pods = [p for p in PODS if p is not SCALE_UP]
    return FakeNetlink({pod.iface: 10 + i for i, pod in enumerate(pods)})


def test_the_demo_node_programs_on_fakes_and_a_restart_writes_nothing(tmp_path: Path) -> None:
    tools, netlink = FakeTools(), pods_node()
    platform = program(tools, netlink, tmp_path)
    kernel = platform.programmers
    assert kernel is not None and kernel.backend == "nft"

    for (table, version), programmer in kernel.iptables.items():
        saved = parse_save("\n".join(tools.iptables.save_lines(version, table)))
        held = saved[table].chains
        for name, rules in programmer.snapshot().items():
            assert held[name].hashes == rule_hashes(name, rules), (table, version, name)
    filter_v4 = parse_save("\n".join(tools.iptables.save_lines(4, "filter")))["filter"].chains
    assert any("cali-FORWARD" in line for line in filter_v4["FORWARD"].lines)
    for pod in PODS:
        if pod is SCALE_UP:
            continue
        assert f"cali-tw-{pod.iface}" in filter_v4 and f"cali-fw-{pod.iface}" in filter_v4
        index = netlink.links[pod.iface][0]
        for address in (pod.ipv4, pod.ipv6):
            suffix = "/128" if ":" in address else "/32"
            assert netlink.routes[address + suffix].oif == index
    assert tools.ipset.sets, "no IP set programmed"
    pools = [s for name, s in tools.ipset.sets.items() if "all-ipam-pools" in name]
    assert pools and all(s.members for s in pools)

    # A restart onto what the first run left: everything adopted, nothing written.
    restores = dict(tools.iptables.calls)
    ipset_restores, route_writes = len(tools.ipset.restores), netlink.writes
    program(tools, netlink, tmp_path)
    assert {t: n for t, n in tools.iptables.calls.items() if t.endswith("-restore")} == {
        t: n for t, n in restores.items() if t.endswith("-restore")
    }
    assert len(tools.ipset.restores) == ipset_restores
    assert netlink.writes == route_writes


def test_a_link_that_changes_during_an_apply_asks_for_another(tmp_path: Path) -> None:
    """A pod's interface that appears while an apply runs (after its routes
    step read the links, say) is the next apply's at once, not the pending
    routes' backstop's, seconds later."""
    tools, netlink = FakeTools(), pods_node()
    platform = LinuxPlatform(
        runner=tools, netlink=netlink, netlink_writer=netlink.write, sysctl_root=str(tmp_path)
    )
    run = tools.run
    seen: list[Sequence[str]] = []

    async def run_and_see_a_link(
        argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        if not seen:  # once, in the first apply
            seen.append(argv)
            platform._on_link_change()  # as the link monitor calls it
        return await run(argv, stdin=stdin, check=check)

    tools.run = run_and_see_a_link  # type: ignore[method-assign]
    dataplane = replay(platform)
    assert seen
    assert dataplane.stats.applies == 2


def test_the_first_apply_reads_each_table_once(tmp_path: Path) -> None:
    """The refresh timers are all due at the first apply, but that apply
    reads every table it writes anyway: the refresher beside it (which
    would read each a second time, the apply waiting on the tools) is
    left to the timers' next turn."""
    tools, netlink = FakeTools(), pods_node()
    platform = LinuxPlatform(
        runner=tools, netlink=netlink, netlink_writer=netlink.write, sysctl_root=str(tmp_path)
    )
    run = tools.run
    reads: list[tuple[str, ...]] = []

    async def counting(
        argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        if (argv[0].endswith("-save") and "-t" in argv) or list(argv[:2]) == ["ipset", "save"]:
            reads.append(tuple(argv))
        return await run(argv, stdin=stdin, check=check)

    tools.run = counting  # type: ignore[method-assign]
    dataplane = Dataplane(platform)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dataplane.run)
            # The refresher is up and waiting before the first message, as
            # it is under Felix (its snapshot comes long after the start).
            await trio.testing.wait_all_tasks_blocked()
            for envelope in demo_log():
                dataplane.send_message(envelope)
            dataplane.close_input()

    trio.run(main)
    assert reads, "nothing read"
    assert sorted(set(reads)) == sorted(reads), "a table read twice"
