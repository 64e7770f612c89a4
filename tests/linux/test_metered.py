"""Felix's kernel-tool metrics, counted at the command runner and netlink seams."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from dataplane.errors import ProgrammingError
from dataplane.linux.ipsets.programmer import IPSetsProgrammer
from dataplane.linux.iptables.backend import IptablesCommands
from dataplane.linux.iptables.chains import IptRule
from dataplane.linux.iptables.table import Table
from dataplane.linux.kernel.cmd import CommandResult, ProcessRunner
from dataplane.linux.kernel.fed import feeding
from dataplane.linux.kernel.sysctls import SysctlWriter
from dataplane.linux.metered import LinuxMeter, MeteredRunner, restore_lines, tool_of
from dataplane.linux.netlink.batch import Request, RouteRequest
from dataplane.linux.rules.chain import Chain
from dataplane.model import IPSet, IPSetType
from dataplane.ops.metrics import Metrics
from tests.linux.fake_ipset import FakeIPSet
from tests.linux.metric_samples import samples
from tests.linux.test_fed import told, told_at


class FakeTools:
    """iptables-save/-restore that hold nothing: saves print an empty table,
    restores succeed unless their input mentions ``refuse`` (then they fail as
    the kernel's parser does, ``--test`` runs included)."""

    def __init__(self, refuse: str = "\0") -> None:
        self.refuse = refuse

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        await trio.lowlevel.checkpoint()
        if argv[0].endswith("-save"):
            return CommandResult(0, b"*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n", b"")
        text = (stdin or b"").decode()
        if self.refuse in text:
            line = next(i for i, t in enumerate(text.splitlines(), 1) if self.refuse in t)
            stderr = f"{argv[0]}: bad rule\nError occurred at line: {line}\n".encode()
            if check:
                raise ProgrammingError(stderr.decode())
            return CommandResult(2, b"", stderr)
        return CommandResult(0, b"", b"")


def test_tools_are_known_by_name_through_a_netns_prefix() -> None:
    argvs = {
        "iptables-nft-restore": ("restore", 4),
        "ip6tables-legacy-save": ("save", 6),
        "ip6tables-restore": ("restore", 6),
        "/usr/sbin/iptables-save": ("save", 4),
        "ipset": ("ipset", 0),
        "conntrack": ("", 0),
        "iptables-nft": ("", 0),
    }
    assert {name: tool_of([name, "-t", "filter"]) for name in argvs} == argvs
    assert tool_of(["ip", "netns", "exec", "node", "ip6tables-nft-restore"]) == ("restore", 6)
    assert tool_of(["ip", "netns", "exec", "node"]) == ("", 0)


def test_restore_lines_count_rule_and_chain_changes_per_table() -> None:
    script = (
        b"*filter\n"
        b":cali-a - [0:0]\n"
        b":cali-b - [0:0]\n"
        b"-F cali-old\n"
        b'-A cali-a -m comment --comment "cali:x" -j ACCEPT\n'
        b'-A cali-a -m comment --comment "cali:y" -j DROP\n'
        b"-D FORWARD -j cali-FORWARD\n"
        b"-I FORWARD 1 -j cali-FORWARD\n"
        b"-R cali-b 1 -j RETURN\n"
        b"-X cali-old\n"
        b"COMMIT\n"
        b"*nat\n"
        b":cali-n - [0:0]\n"
        b"-A cali-n -j MASQUERADE\n"
        b"COMMIT\n"
    )
    assert restore_lines(script) == {"filter": 9, "nat": 2}


def test_the_runner_counts_calls_failures_and_executed_lines() -> None:
    metrics = Metrics(process=False)
    runner = MeteredRunner(FakeTools(refuse="BAD"), metrics)
    restore = ["iptables-nft-restore", "--noflush", "--wait", "10"]

    async def main() -> None:
        good = b"*filter\n:cali-a - [0:0]\n-A cali-a -j ACCEPT\nCOMMIT\n"
        await runner.run(restore, stdin=good)
        await runner.run(
            ["ip6tables-nft-restore", "--noflush"], stdin=good.replace(b"filter", b"raw")
        )
        with pytest.raises(ProgrammingError):  # a failed restore executes nothing
            await runner.run(restore, stdin=b"*filter\n-A cali-a BAD\nCOMMIT\n")
        # The parser asked: a call, but its refusal is an answer, not an error.
        probe = await runner.run([*restore, "--test"], stdin=b"*filter\n-A x BAD\n", check=False)
        assert probe.returncode == 2
        await runner.run([*restore, "--test"], stdin=good)
        await runner.run(["iptables-nft-save", "-t", "filter"])
        await runner.run(["conntrack", "-D"])  # not a tool of Felix's metrics

    trio.run(main)
    r = metrics.registry
    assert {
        name: samples(r, name)
        for name in (
            "felix_iptables_restore_calls_total",
            "felix_iptables_restore_errors_total",
            "felix_iptables_save_calls_total",
            "felix_iptables_save_errors_total",
            "felix_iptables_lines_executed_total",
        )
    } == {
        "felix_iptables_restore_calls_total": {(): 5.0},
        "felix_iptables_restore_errors_total": {(): 1.0},
        "felix_iptables_save_calls_total": {(): 1.0},
        "felix_iptables_save_errors_total": {(): 0.0},
        "felix_iptables_lines_executed_total": {("4", "filter"): 2.0, ("6", "raw"): 2.0},
    }


def test_a_fed_command_is_counted_as_run_and_any_other_fed_as_the_inner_runner_feeds(
    tmp_path: Path,
) -> None:
    """A counted tool fed its input runs gathered, through the counting
    ``run``; any other (nft) streams as the wrapped process runner streams."""
    metrics = Metrics(process=False)
    read = told_at(tmp_path / "read")

    async def main() -> None:
        async with feeding(MeteredRunner(FakeTools(), metrics), ["iptables-nft-restore"]) as fed:
            fed.send(b"*filter\n:cali-a - [0:0]\n")
            fed.send(b"-A cali-a -j ACCEPT\nCOMMIT\n")
        assert fed.result == CommandResult(0, b"", b"")
        streaming = MeteredRunner(ProcessRunner(), metrics)
        argv = ["sh", "-c", 'head -c 3 > "$0" && cat', str(read)]
        async with feeding(streaming, argv) as fed:
            fed.send(b"abc")
            assert await told(read) == b"abc"  # read before the block ends: streamed
            fed.send(b"def")
        assert fed.result is not None and fed.result.stdout == b"def"

    trio.run(main)
    r = metrics.registry
    assert samples(r, "felix_iptables_restore_calls_total") == {(): 1.0}
    assert samples(r, "felix_iptables_lines_executed_total") == {("4", "filter"): 2.0}


def test_a_tables_restores_are_counted_per_version_and_table() -> None:
    metrics = Metrics(process=False)
    runner = MeteredRunner(FakeTools(refuse="6666"), metrics)
    table = Table("filter", 6, runner, IptablesCommands.for_backend("legacy", 6))
    table.update_chain(Chain("cali-a", (IptRule("-p tcp", "-j ACCEPT"), IptRule("", "-j DROP"))))
    table.set_hooks("FORWARD", [IptRule("", "-j cali-a")])

    async def main() -> None:
        await table.apply()
        # A chain the kernel refuses: found by the parser, written fail-closed.
        table.update_chain(Chain("cali-b", (IptRule("-p tcp --dport 6666", "-j ACCEPT"),)))
        await table.apply()

    trio.run(main)
    assert set(table.quarantine) == {"cali-b"}
    r = metrics.registry
    # First apply: a save, then one restore: cali-a declared, its 2 rules
    # and the hook inserted = 4 lines.
    # Second: the restore fails, the kernel is read again (the fake holds
    # nothing, so both chains are pending), the parser is asked about both
    # and then each (three --test runs), and everything is written again:
    # cali-a 3 lines, the hook 1, cali-b fail-closed 2 = 6 lines.
    assert samples(r, "felix_iptables_lines_executed_total") == {("6", "filter"): 10.0}
    assert samples(r, "felix_iptables_restore_calls_total") == {(): 6.0}
    assert samples(r, "felix_iptables_restore_errors_total") == {(): 1.0}
    assert samples(r, "felix_iptables_save_calls_total") == {(): 2.0}


def test_ipset_calls_lines_and_the_sets_held() -> None:
    metrics = Metrics(process=False)
    fake = FakeIPSet()
    ipsets = IPSetsProgrammer(MeteredRunner(fake, metrics), ipv6=True)
    ipsets.replace(IPSet("s:a", IPSetType.IP, frozenset({"10.0.0.1", "10.0.0.2", "fd00::1"})))
    ipsets.replace(IPSet("s:b", IPSetType.NET, frozenset({"10.1.0.0/16"})))

    async def main() -> None:
        await ipsets.apply_updates()
        fake.fail_restores = 1
        ipsets.update_members("s:a", frozenset({"10.0.0.3"}), frozenset())
        await ipsets.apply_updates()  # fails whole, then the set alone succeeds

    trio.run(main)
    LinuxMeter(metrics).observe({}, ipsets.counts(), 0)
    r = metrics.registry
    assert {
        name: samples(r, name)
        for name in (
            "felix_ipset_calls_total",
            "felix_ipset_errors_total",
            "felix_ipset_lines_executed_total",
            "felix_ipsets_calico",
        )
    } == {
        # save, restore; then restore (failed), save, restore alone.
        "felix_ipset_calls_total": {(): 5.0},
        "felix_ipset_errors_total": {(): 1.0},
        # 4 creates and 4 adds; then the one add (the failed batch is not counted).
        "felix_ipset_lines_executed_total": {(): 9.0},
        "felix_ipsets_calico": {("4",): 2.0, ("6",): 2.0},
    }


class FakeHandle:
    """The pyroute2 calls the VXLAN programmer makes, answered from a list of links."""

    def __init__(self) -> None:
        self.links: dict[str, int] = {}

    def link(self, command: str, **kwargs: Any) -> list[dict[str, Any]]:
        if command == "add":
            self.links[kwargs["ifname"]] = len(self.links) + 1
        elif command == "del":
            self.links = {n: i for n, i in self.links.items() if i != kwargs["index"]}
        return [{"index": i} for n, i in self.links.items() if n == kwargs.get("ifname")]

    def addr(self, command: str, **kwargs: Any) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        pass


def test_netlink_writes_are_counted_requests_links_and_addresses() -> None:
    metrics = Metrics(process=False)
    meter = LinuxMeter(metrics)
    sent: list[Request] = []

    def batch(requests: Sequence[Request]) -> list[OSError | None]:
        sent.extend(requests)
        return [None] * len(requests)

    write = meter.netlink_writer(batch)
    routes = [RouteRequest("replace", f"10.0.0.{i}/32", 80) for i in range(3)]
    assert write(routes) == [None, None, None]
    assert write([]) == []
    handle = meter.netlink(FakeHandle)()
    handle.link("add", ifname="vxlan.calico", kind="vxlan")
    assert handle.link("get", ifname="vxlan.calico") == [{"index": 1}]
    handle.addr("add", index=1, address="10.0.0.1", prefixlen=32)
    handle.addr("dump")
    handle.link("del", index=1)
    handle.close()
    assert sent == routes
    assert samples(metrics.registry, "dataplane_route_writes_total") == {(): 6.0}


def test_observe_sets_the_gauges_and_adds_the_sysctl_writes(tmp_path: Path) -> None:
    for key, value in {
        "net/ipv4/ip_forward": "1",
        "net/ipv4/conf/cali1/forwarding": "0",
        "net/ipv4/conf/cali1/proxy_arp": "0",
        "net/ipv4/neigh/cali1/proxy_delay": "0",
        "net/ipv4/conf/cali1/rp_filter": "1",
    }.items():
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_text(value + "\n")
    sysctls = SysctlWriter(tmp_path, ipv6=False)
    trio.run(sysctls.apply, [("cali1", 5, True)])
    assert sysctls.writes == 2  # forwarding and proxy_arp; the rest were right
    tables = {}
    for name, version, chains in (("filter", 4, 3), ("nat", 6, 1)):
        tables[(name, version)] = table = Table(
            name, version, FakeTools(), IptablesCommands.for_backend("nft", version)
        )
        for i in range(chains):
            table.update_chain(Chain(f"cali-{i}", (IptRule("", "-j ACCEPT"),) * (i + 1)))
    tables[("filter", 4)].remove_chain("cali-0")
    metrics = Metrics(process=False)
    meter = LinuxMeter(metrics)
    meter.observe(tables, {4: 7}, sysctls.writes)
    trio.run(sysctls.apply, [("cali1", 5, False)])  # rp_filter off
    meter.observe(tables, {4: 7}, sysctls.writes)
    r = metrics.registry
    assert {
        name: samples(r, name)
        for name in (
            "felix_iptables_chains",
            "felix_iptables_rules",
            "felix_ipsets_calico",
            "dataplane_sysctl_writes_total",
        )
    } == {
        "felix_iptables_chains": {("4", "filter"): 2.0, ("6", "nat"): 1.0},
        "felix_iptables_rules": {("4", "filter"): 5.0, ("6", "nat"): 1.0},
        "felix_ipsets_calico": {("4",): 7.0},
        "dataplane_sysctl_writes_total": {(): 3.0},
    }
