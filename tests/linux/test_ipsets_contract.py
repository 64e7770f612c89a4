"""Contract suite for IPSetsProgrammer, run against FakeIPSet and the kernel.

Every test taking ``backend`` runs twice: once on the fake, once on the
real ``ipset`` tool inside a fresh network namespace (skipped unless root).
Kernel state is read back with ``ipset list`` and parsed here, not with the
programmer's own ``ipset save`` parser, so the two check each other. The
recorded restore scripts show *how* the state was reached (a swap, no
create on adoption); the listing shows *what* the kernel ends up with.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.errors import ProgrammingError
from dataplane.linux.ipsets.names import MAX_NAME_LEN, is_owned, main_name, temp_name
from dataplane.linux.ipsets.programmer import IPSetsProgrammer
from dataplane.linux.ipsets.save import KernelSet, SetMeta, parse_save
from dataplane.linux.kernel.cmd import CommandResult, CommandRunner, ProcessRunner
from dataplane.model import IPSet, IPSetType
from tests.conftest import run_trio
from tests.linux.fake_ipset import FakeIPSet
from tests.linux.held_reads import HeldReads, write_during_a_read

IP, NET, PORT = IPSetType.IP, IPSetType.NET, IPSetType.IP_AND_PORT
MAX = 1048576

# name -> (type, family, maxelem, members): what `ipset list` shows.
SetState = tuple[str, str, int, frozenset[str]]


def ipset(set_id: str, kind: IPSetType, *members: str) -> IPSet:
    return IPSet(set_id, kind, frozenset(members))


# The type of the sets these tests name by id (the kernel name holds it).
_TYPE_OF = {
    "net": IPSetType.NET,
    "n": IPSetType.NET,
    "more": IPSetType.NET,
    "port": IPSetType.IP_AND_PORT,
}


def v4(set_id: str, kind: IPSetType | None = None) -> str:
    return main_name(set_id, 4, kind or _TYPE_OF.get(set_id, IPSetType.IP))


def v6(set_id: str, kind: IPSetType | None = None) -> str:
    return main_name(set_id, 6, kind or _TYPE_OF.get(set_id, IPSetType.IP))


def parse_listing(text: str) -> dict[str, SetState]:
    """Parse ``ipset list`` (not ``save``: independent of the code under test)."""
    sets: dict[str, SetState] = {}
    for block in text.split("Name: ")[1:]:
        lines = block.splitlines()
        fields = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        header = fields["Header"].split()
        options = dict(zip(header[::2], header[1::2], strict=False))
        start = lines.index("Members:") + 1 if "Members:" in lines else len(lines)
        members = frozenset(line.split()[0] for line in lines[start:] if line.strip())
        sets[lines[0].strip()] = (
            fields["Type"],
            options["family"],
            int(options["maxelem"]),
            members,
        )
    return sets


class Recorder:
    """Passes commands through, remembering each (argv, stdin)."""

    def __init__(self, inner: CommandRunner) -> None:
        self.inner = inner
        self.calls: list[tuple[list[str], str]] = []

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        self.calls.append((list(argv), (stdin or b"").decode()))
        return await self.inner.run(argv, stdin=stdin, check=check)

    def restores(self) -> list[str]:
        return [stdin for argv, stdin in self.calls if "restore" in argv]

    def restore_lines(self) -> list[str]:
        return [line for script in self.restores() for line in script.splitlines()]

    def reads(self) -> int:
        return sum(1 for argv, _ in self.calls if "save" in argv or "list" in argv)

    def clear(self) -> None:
        self.calls.clear()


class Backend:
    """One ipset "kernel" plus the means to inspect and meddle with it."""

    def __init__(self, tool: CommandRunner, fake: FakeIPSet | None) -> None:
        self.tool = tool
        self.fake = fake
        self.runner = Recorder(tool)

    def programmer(self, *, ipv6: bool = True, max_size: int = MAX) -> IPSetsProgrammer:
        return IPSetsProgrammer(self.runner, ipv6=ipv6, max_size=max_size)

    async def ipset(self, *args: str) -> None:
        """Someone else (an operator, another agent) runs ``ipset``."""
        await self.tool.run(["ipset", *args])

    async def state(self) -> dict[str, SetState]:
        return parse_listing((await self.tool.run(["ipset", "list"])).stdout.decode())

    async def ours(self) -> dict[str, SetState]:
        return {name: s for name, s in (await self.state()).items() if is_owned(name)}

    async def reference(self, name: str, *, on: bool) -> None:
        """Make a rule reference ``name`` (or stop), as iptables would."""
        if self.fake is not None:
            if on:
                self.fake.in_use.add(name)
            else:
                self.fake.in_use.discard(name)
            return
        rule = ["INPUT", "-m", "set", "--match-set", name, "src", "-j", "ACCEPT"]
        await self.tool.run(["iptables", "-A" if on else "-D", *rule])


_netns_numbers = itertools.count()


@pytest.fixture(params=["fake", "real"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "fake":
        fake = FakeIPSet()
        yield Backend(fake, fake)
        return
    if os.geteuid() != 0 or shutil.which("ipset") is None or shutil.which("ip") is None:
        pytest.skip("the real variant needs root, ipset and ip")
    name = f"dpi{os.getpid()}{next(_netns_numbers)}"
    created = subprocess.run(["ip", "netns", "add", name], capture_output=True, check=False)
    if created.returncode != 0:
        pytest.skip(f"cannot create a network namespace: {created.stderr.decode().strip()}")
    try:
        yield Backend(ProcessRunner(netns=name), None)
    finally:
        # Deleting the namespace takes its sets and rules with it.
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)


def run(body: Callable[[], Awaitable[object]]) -> None:
    run_trio(body)


THREE = (
    ipset("ip", IP, "10.0.0.1", "10.0.0.2", "fd00::1"),
    ipset("net", NET, "10.0.0.0/24", "10.1.2.3/32", "fd00::/64", "fd00::5/128"),
    ipset("port", PORT, "10.0.0.1,tcp:8080", "10.0.0.2,sctp:9", "fd00::1,udp:53"),
)
THREE_STATE: dict[str, SetState] = {
    v4("ip"): ("hash:ip", "inet", MAX, frozenset({"10.0.0.1", "10.0.0.2"})),
    v6("ip"): ("hash:ip", "inet6", MAX, frozenset({"fd00::1"})),
    v4("net"): ("hash:net", "inet", MAX, frozenset({"10.0.0.0/24", "10.1.2.3"})),
    v6("net"): ("hash:net", "inet6", MAX, frozenset({"fd00::/64", "fd00::5"})),
    v4("port"): ("hash:ip,port", "inet", MAX, frozenset({"10.0.0.1,tcp:8080", "10.0.0.2,sctp:9"})),
    v6("port"): ("hash:ip,port", "inet6", MAX, frozenset({"fd00::1,udp:53"})),
}


async def programmed(backend: Backend, *sets: IPSet, ipv6: bool = True) -> IPSetsProgrammer:
    programmer = backend.programmer(ipv6=ipv6)
    for s in sets:
        programmer.replace(s)
    await programmer.apply_updates()
    await programmer.apply_deletions()
    backend.runner.clear()
    return programmer


# ---------------------------------------------------------------------------
# The contract.
# ---------------------------------------------------------------------------


def test_creates_every_type_with_both_families_in_one_restore(backend: Backend) -> None:
    async def body() -> None:
        programmer = backend.programmer()
        for s in (*THREE, ipset("empty", IP)):
            programmer.replace(s)
        await programmer.apply_updates()
        expected = {
            **THREE_STATE,
            v4("empty"): ("hash:ip", "inet", MAX, frozenset()),
            v6("empty"): ("hash:ip", "inet6", MAX, frozenset()),
        }
        assert await backend.ours() == expected
        assert len(backend.runner.restores()) == 1
        assert programmer.desired_ids() == {"ip", "net", "port", "empty"}

    run(body)


def test_zero_prefix_becomes_two_halves_shared_with_explicit_members(backend: Backend) -> None:
    async def body() -> None:
        programmer = await programmed(backend, ipset("n", NET, "0.0.0.0/0", "0.0.0.0/1", "::/0"))
        state = await backend.ours()
        assert state[v4("n")][3] == {"0.0.0.0/1", "128.0.0.0/1"}
        assert state[v6("n")][3] == {"::/1", "8000::/1"}
        # "0.0.0.0/1" is still wanted on its own; the other half is not.
        programmer.update_members("n", frozenset(), frozenset({"0.0.0.0/0", "::/0"}))
        await programmer.apply_updates()
        state = await backend.ours()
        assert state[v4("n")][3] == {"0.0.0.0/1"}
        assert state[v6("n")][3] == frozenset()

    run(body)


def test_member_deltas_are_add_and_del_lines_only(backend: Backend) -> None:
    async def body() -> None:
        programmer = await programmed(backend, *THREE)
        programmer.update_members(
            "ip", frozenset({"10.0.0.3", "fd00::2"}), frozenset({"10.0.0.1", "10.9.9.9"})
        )
        programmer.update_members("port", frozenset({"10.0.0.1,udp:8080"}), frozenset())
        await programmer.apply_updates()
        assert sorted(backend.runner.restore_lines()) == [
            f"add {v4('ip')} 10.0.0.3",
            f"add {v4('port')} 10.0.0.1,udp:8080",
            f"add {v6('ip')} fd00::2",
            f"del {v4('ip')} 10.0.0.1",
        ]
        assert backend.runner.reads() == 0  # the cache is trusted between resyncs
        state = await backend.ours()
        assert state[v4("ip")][3] == {"10.0.0.2", "10.0.0.3"}
        assert state[v6("ip")][3] == {"fd00::1", "fd00::2"}
        assert state[v4("port")][3] == {"10.0.0.1,tcp:8080", "10.0.0.1,udp:8080", "10.0.0.2,sctp:9"}

    run(body)


def test_replacing_an_existing_set_swaps_in_a_filled_temp_set(backend: Backend) -> None:
    async def body() -> None:
        programmer = await programmed(backend, *THREE)
        programmer.replace(ipset("ip", IP, "10.0.0.7", "fd00::1"))  # IPv6 half unchanged
        await programmer.apply_updates()
        [script] = backend.runner.restores()
        temp = temp_name("ip", 4)
        assert script.splitlines() == [
            f"create {temp} hash:ip family inet maxelem {MAX}",
            f"add {temp} 10.0.0.7",
            f"swap {temp} {v4('ip')}",
            f"destroy {temp}",
        ]
        expected = dict(THREE_STATE)
        expected[v4("ip")] = ("hash:ip", "inet", MAX, frozenset({"10.0.0.7"}))
        assert await backend.ours() == expected

    run(body)


def test_replace_with_unchanged_content_writes_nothing(backend: Backend) -> None:
    async def body() -> None:
        programmer = await programmed(backend, *THREE)
        for s in THREE:
            programmer.replace(s)
        await programmer.apply_updates()
        await programmer.apply_deletions()
        assert backend.runner.calls == []

    run(body)


@pytest.mark.parametrize(
    ("new", "kernel_type"),
    [
        (ipset("x", NET, "10.0.0.0/8", "fd00::/8"), "hash:net"),
        (ipset("x", PORT, "10.0.0.1,tcp:1", "fd00::1,tcp:2"), "hash:ip,port"),
    ],
)
def test_type_change_is_a_new_set_and_the_old_one_goes_as_stale(
    backend: Backend, new: IPSet, kernel_type: str
) -> None:
    async def body() -> None:
        programmer = await programmed(backend, ipset("x", IP, "10.0.0.1", "fd00::1"))
        programmer.replace(new)
        assert programmer.kernel_name("x", 4) == v4("x", new.type) != v4("x", IP)
        await programmer.apply_updates()
        state = await backend.ours()
        assert state[v4("x", new.type)][0] == state[v6("x", new.type)][0] == kernel_type
        assert state[v4("x", new.type)][3] | state[v6("x", new.type)][3] == new.members
        assert v4("x", IP) in state  # rules may still use it until iptables is written
        await programmer.apply_deletions()
        assert set(await backend.ours()) == {v4("x", new.type), v6("x", new.type)}

    run(body)


def test_type_change_of_a_referenced_set_never_blocks(backend: Backend) -> None:
    # The kernel swaps only sets of equal type and will neither destroy nor
    # rename a set a rule references: under its own name, the new type is
    # written while the old set is in use, and the old set goes once the
    # rules name the new one (between the two the platform writes iptables).
    async def body() -> None:
        programmer = await programmed(backend, ipset("x", IP, "10.0.0.1"))
        await backend.reference(v4("x", IP), on=True)
        programmer.replace(ipset("x", NET, "10.0.0.0/8"))
        await programmer.apply_updates()
        assert programmer.take_refusals() == []
        await backend.reference(v4("x", IP), on=False)
        await programmer.apply_deletions()
        state = await backend.ours()
        assert state == {
            v4("x", NET): ("hash:net", "inet", MAX, frozenset({"10.0.0.0/8"})),
            v6("x", NET): ("hash:net", "inet6", MAX, frozenset()),
        }

    run(body)


def test_a_tampered_referenced_set_alone_is_quarantined(backend: Backend) -> None:
    # Someone replaced our set with one of another type, and a rule uses it:
    # the kernel will not destroy it. That set waits in quarantine; the
    # apply, and every other set, goes on.
    async def body() -> None:
        programmer = await programmed(backend, *THREE)
        await backend.ipset("destroy", v4("ip"))
        await backend.ipset("create", v4("ip"), "hash:net", "family", "inet")
        await backend.reference(v4("ip"), on=True)
        programmer.mark_for_resync()
        programmer.update_members("net", frozenset({"10.7.0.0/16"}), frozenset())
        await programmer.apply_updates()
        ((set_id, message),) = programmer.take_refusals()
        assert set_id == "ip" and "destroy" in message
        assert "10.7.0.0/16" in (await backend.ours())[v4("net")][3]
        await backend.reference(v4("ip"), on=False)

    run(body)


def test_sets_are_destroyed_only_by_apply_deletions(backend: Backend) -> None:
    async def body() -> None:
        programmer = await programmed(backend, *THREE)
        programmer.remove("net")
        programmer.remove("never-existed")
        assert programmer.desired_ids() == {"ip", "port"}
        await programmer.apply_updates()
        assert backend.runner.restores() == []
        assert v4("net") in await backend.ours()
        await programmer.apply_deletions()
        assert set(await backend.ours()) == {v4("ip"), v6("ip"), v4("port"), v6("port")}

    run(body)


def test_destroying_a_referenced_set_fails_until_the_rule_is_gone(backend: Backend) -> None:
    async def body() -> None:
        programmer = await programmed(backend, *THREE)
        await backend.reference(v4("ip"), on=True)
        programmer.remove("ip")
        await programmer.apply_updates()
        with pytest.raises(ProgrammingError, match=v4("ip")):
            await programmer.apply_deletions()
        await backend.reference(v4("ip"), on=False)
        await programmer.apply_deletions()
        assert set(await backend.ours()) == set(THREE_STATE) - {v4("ip"), v6("ip")}

    run(body)


def test_foreign_sets_survive_everything_including_cleanup_all(backend: Backend) -> None:
    async def body() -> None:
        await backend.ipset("create", "KUBE-FOREIGN", "hash:ip", "family", "inet")
        await backend.ipset("add", "KUBE-FOREIGN", "192.168.0.1")
        await backend.ipset("create", "cali-not-ours", "hash:net", "family", "inet6")
        await backend.ipset("create", "cali41ip", "hash:ip", "family", "inet")
        foreign = await backend.state()
        programmer = await programmed(backend, *THREE)
        programmer.remove("ip")
        programmer.mark_for_resync()
        await programmer.apply_updates()
        await programmer.apply_deletions()
        await programmer.cleanup_all()
        assert await backend.state() == foreign
        # cleanup forgot the kernel's sets, not what is desired: apply recreates.
        await programmer.apply_updates()
        assert set(await backend.ours()) == set(THREE_STATE) - {v4("ip"), v6("ip")}

    run(body)


def test_drift_is_repaired_after_mark_for_resync(backend: Backend) -> None:
    async def body() -> None:
        programmer = await programmed(backend, *THREE, ipset("d", IP, "10.0.0.9"))
        await backend.ipset("flush", v4("ip"))
        await backend.ipset("del", v4("net"), "10.1.2.3")
        await backend.ipset("add", v4("port"), "10.0.0.3,tcp:1")
        await backend.ipset("destroy", v6("port"))
        await backend.ipset("destroy", v4("d"))
        await backend.ipset("create", v4("stale"), "hash:ip", "family", "inet")
        await backend.ipset("create", temp_name("ip", 6), "hash:ip", "family", "inet6")
        # Without a resync nothing is read, so nothing is noticed.
        await programmer.apply_updates()
        assert backend.runner.calls == []
        programmer.mark_for_resync()
        await programmer.apply_updates()
        assert backend.runner.reads() == 1
        lines = backend.runner.restore_lines()
        assert not [line for line in lines if line.startswith(("swap", "destroy"))]
        assert sorted(line for line in lines if line.startswith("create")) == [
            f"create {v4('d')} hash:ip family inet maxelem {MAX}",
            f"create {v6('port')} hash:ip,port family inet6 maxelem {MAX}",
        ]
        assert f"del {v4('port')} 10.0.0.3,tcp:1" in lines
        expected = {
            **THREE_STATE,
            v4("d"): ("hash:ip", "inet", MAX, frozenset({"10.0.0.9"})),
            v6("d"): ("hash:ip", "inet6", MAX, frozenset()),
        }
        state = await backend.ours()
        assert {name: state[name] for name in expected} == expected
        assert set(state) - set(expected) == {v4("stale"), temp_name("ip", 6)}
        await programmer.apply_deletions()
        assert await backend.ours() == expected

    run(body)


def test_a_refresh_beside_the_applies_finds_drift_and_never_takes_back_a_write(
    backend: Backend,
) -> None:
    async def body() -> None:
        runner = HeldReads(backend.runner, lambda argv: "save" in argv)
        programmer = IPSetsProgrammer(runner, ipv6=True, max_size=MAX)
        for ipset_ in THREE:
            programmer.replace(ipset_)
        await programmer.apply_updates()
        # As the kernel was left: nothing differs, nothing to write.
        assert not await programmer.refresh()
        backend.runner.clear()
        await programmer.apply_updates()
        assert backend.runner.calls == []
        # Someone flushes a set, deletes a member, destroys a set and leaves
        # one of our names behind: found beside, repaired by the next apply
        # without a read of its own.
        await backend.ipset("flush", v4("ip"))
        await backend.ipset("del", v4("net"), "10.1.2.3")
        await backend.ipset("destroy", v6("port"))
        await backend.ipset("create", v4("stale"), "hash:ip", "family", "inet")
        assert await programmer.refresh()
        backend.runner.clear()
        await programmer.apply_updates()
        await programmer.apply_deletions()
        assert backend.runner.reads() == 0
        assert await backend.ours() == THREE_STATE
        assert not await programmer.refresh()

        # A read taken before a write keeps its hands off what that write
        # wrote: the save is held back until the write has landed.
        async def write() -> None:  # 10.0.0.7: not in the save
            programmer.update_members("ip", frozenset({"10.0.0.7"}), frozenset())
            await programmer.apply_updates()

        await write_during_a_read(runner, programmer.refresh, write)
        backend.runner.clear()
        await programmer.apply_updates()
        assert backend.runner.calls == []  # nothing taken back, nothing to write again
        assert "10.0.0.7" in (await backend.ours())[v4("ip")][3]
        assert not await programmer.refresh()

    run(body)


def test_a_restarted_programmer_adopts_correct_sets_without_rewriting(backend: Backend) -> None:
    async def body() -> None:
        await programmed(backend, *THREE)
        second = backend.programmer()
        second.mark_for_resync()  # what the platform does at start-up
        for s in THREE:
            second.replace(s)
        second.replace(ipset("new", IP, "10.0.0.4"))
        await second.apply_updates()
        await second.apply_deletions()
        [script] = backend.runner.restores()
        assert script.splitlines() == [
            f"create {v4('new')} hash:ip family inet maxelem {MAX}",
            f"add {v4('new')} 10.0.0.4",
            f"create {v6('new')} hash:ip family inet6 maxelem {MAX}",
        ]
        assert backend.runner.reads() == 1

    run(body)


def test_a_different_maxelem_is_fixed_by_swap(backend: Backend) -> None:
    async def body() -> None:
        small = backend.programmer(max_size=1000)
        small.replace(THREE[0])
        await small.apply_updates()
        big = backend.programmer()
        big.replace(THREE[0])
        await big.apply_updates()
        assert [line for line in backend.runner.restore_lines() if line.startswith("swap")] == [
            f"swap {temp_name('ip', 4)} {v4('ip')}",
            f"swap {temp_name('ip', 6)} {v6('ip')}",
        ]
        state = await backend.ours()
        assert state == {name: THREE_STATE[name] for name in (v4("ip"), v6("ip"))}

    run(body)


def test_a_failed_batch_is_rewritten_set_by_set_in_the_same_apply(
    backend: Backend,
) -> None:
    async def body() -> None:
        programmer = await programmed(backend, *THREE)
        await backend.ipset("destroy", v4("ip"))  # behind the cache's back
        programmer.update_members("ip", frozenset({"10.0.0.3"}), frozenset())
        programmer.replace(ipset("more", NET, "10.8.0.0/16"))
        # The batch fails on the vanished set; each set is then written alone
        # against a fresh read of the kernel, which recreates it.
        await programmer.apply_updates()
        assert programmer.desired_ids() == {"ip", "net", "port", "more"}
        assert len(programmer.quarantine) == 0
        backend.runner.clear()
        await programmer.apply_updates()
        assert backend.runner.reads() == 0  # the cache is right again
        expected = {
            **THREE_STATE,
            v4("ip"): ("hash:ip", "inet", MAX, frozenset({"10.0.0.1", "10.0.0.2", "10.0.0.3"})),
            v4("more"): ("hash:net", "inet", MAX, frozenset({"10.8.0.0/16"})),
            v6("more"): ("hash:net", "inet6", MAX, frozenset()),
        }
        assert await backend.ours() == expected

    run(body)


def test_ipv6_off_programs_only_ipv4_sets(backend: Backend) -> None:
    async def body() -> None:
        programmer = await programmed(backend, *THREE, ipv6=False)
        programmer.update_members("ip", frozenset({"fd00::9", "10.0.0.9"}), frozenset({"fd00::1"}))
        await programmer.apply_updates()
        expected = {name: s for name, s in THREE_STATE.items() if s[1] == "inet"}
        expected[v4("ip")] = (
            "hash:ip",
            "inet",
            MAX,
            frozenset({"10.0.0.1", "10.0.0.2", "10.0.0.9"}),
        )
        assert await backend.ours() == expected

    run(body)


def test_long_and_odd_ids_get_short_stable_names(backend: Backend) -> None:
    async def body() -> None:
        ids = ["s:" + "q" * 40, "with space", "_leading", "a" * 25]
        programmer = await programmed(backend, *(ipset(i, IP, "10.0.0.1") for i in ids))
        state = await backend.ours()
        assert set(state) == {main_name(i, v) for i in ids for v in (4, 6)}
        assert all(len(name) <= MAX_NAME_LEN for name in state)
        assert v4("a" * 25) == "cali40" + "a" * 25
        assert programmer.kernel_name("with space", 4) == v4("with space") != "cali40with space"

    run(body)


def test_cleanup_all_also_removes_leftover_temp_sets(backend: Backend) -> None:
    async def body() -> None:
        programmer = await programmed(backend, *THREE)
        await backend.ipset("create", temp_name("zz", 4), "hash:ip", "family", "inet")
        await programmer.cleanup_all()
        assert await backend.ours() == {}
        assert len(backend.runner.restores()) == 1

    run(body)


def test_500_sets_with_100k_members_go_out_in_one_restore(backend: Backend) -> None:
    addresses = [f"10.{n >> 16}.{(n >> 8) & 255}.{n & 255}" for n in range(100_000)]
    sets = [ipset(f"scale{i}", IP, *addresses[i * 200 : (i + 1) * 200]) for i in range(500)]

    async def body() -> None:
        programmer = backend.programmer()
        for s in sets:
            programmer.replace(s)
        started = time.perf_counter()
        await programmer.apply_updates()
        elapsed = time.perf_counter() - started
        assert len(backend.runner.restores()) == 1
        assert elapsed < 10, f"{elapsed:.2f}s"
        state = await backend.ours()
        assert sum(len(s[3]) for s in state.values()) == 100_000
        assert len(state) == 1000
        # A fresh programmer adopting all of it reads once and writes nothing.
        backend.runner.clear()
        again = backend.programmer()
        for s in sets:
            again.replace(s)
        await again.apply_updates()
        assert backend.runner.restores() == []

    run(body)


# ---------------------------------------------------------------------------
# Fake-only: injected faults, and a property over arbitrary histories.
# ---------------------------------------------------------------------------


def test_injected_restore_failure_half_applies_then_converges() -> None:
    fake = FakeIPSet()
    backend = Backend(fake, fake)

    async def body() -> None:
        programmer = await programmed(backend, *THREE)
        programmer.replace(ipset("ip", IP, "10.0.0.5"))
        programmer.update_members("net", frozenset({"10.2.0.0/16"}), frozenset())
        fake.fail_restores = 1
        # Half of the batch went through before it failed; the same apply
        # re-reads the kernel and writes each set alone.
        await programmer.apply_updates()
        await programmer.apply_deletions()
        expected = dict(THREE_STATE)
        expected[v4("ip")] = ("hash:ip", "inet", MAX, frozenset({"10.0.0.5"}))
        expected[v6("ip")] = ("hash:ip", "inet6", MAX, frozenset())
        expected[v4("net")] = (
            "hash:net",
            "inet",
            MAX,
            frozenset({"10.0.0.0/24", "10.1.2.3", "10.2.0.0/16"}),
        )
        assert await backend.ours() == expected

    run(body)


def test_a_cancelled_restore_makes_the_next_apply_read_the_kernel() -> None:
    fake = FakeIPSet()
    backend = Backend(fake, fake)

    class Hanging(Recorder):
        hang = True

        async def run(
            self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
        ) -> CommandResult:
            result = await super().run(argv, stdin=stdin, check=check)
            if self.hang and "restore" in argv:
                await trio.sleep_forever()  # applied, but never reports back
            return result

    runner = Hanging(fake)

    async def body() -> None:
        programmer = IPSetsProgrammer(runner)
        programmer.replace(THREE[0])
        with trio.move_on_after(5):  # MockClock: no real waiting
            await programmer.apply_updates()
        runner.hang = False
        runner.clear()
        await programmer.apply_updates()
        assert runner.reads() == 1
        assert runner.restores() == []  # what did go through is adopted
        assert set(await backend.ours()) == {v4("ip"), v6("ip")}

    run(body)


_POOLS = {
    IP: ["10.0.0.1", "10.0.0.2", "fd00::1", "fd00::2"],
    NET: ["10.0.0.0/24", "10.0.0.1/32", "0.0.0.0/0", "0.0.0.0/1", "::/0", "8000::/1", "fd00::/64"],
    PORT: ["10.0.0.1,tcp:80", "10.0.0.1,udp:80", "fd00::1,tcp:80"],
}
_IDS = ["a", "b", "c", "s:" + "h" * 30]


def _kernel_forms(kind: IPSetType, member: str) -> list[str]:
    if kind is NET and member.endswith("/0"):
        return ["0.0.0.0/1", "128.0.0.0/1"] if "." in member else ["::/1", "8000::/1"]
    if kind is NET and member.endswith(("/32", "/128")):
        return [member.rpartition("/")[0]]
    return [member]


def _expected(desired: dict[str, tuple[IPSetType, set[str]]]) -> dict[str, SetState]:
    names = {IP: "hash:ip", NET: "hash:net", PORT: "hash:ip,port"}
    state: dict[str, SetState] = {}
    for set_id, (kind, members) in desired.items():
        for version, family in ((4, "inet"), (6, "inet6")):
            forms = {
                form
                for m in members
                if (":" in m.partition(",")[0]) == (version == 6)
                for form in _kernel_forms(kind, m)
            }
            state[main_name(set_id, version, kind)] = (names[kind], family, MAX, frozenset(forms))
    return state


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("replace"), st.sampled_from(_IDS), st.sampled_from(list(_POOLS)),
                  st.sets(st.integers(0, 6))),
        st.tuples(st.just("update"), st.sampled_from(_IDS), st.sets(st.integers(0, 6)),
                  st.sets(st.integers(0, 6))),
        st.tuples(st.just("remove"), st.sampled_from(_IDS)),
        st.tuples(st.just("apply"), st.integers(0, 2)),
        st.tuples(st.just("drift"), st.sampled_from(["flush", "destroy", "stray"]),
                  st.integers(0, 20)),
    ),
    max_size=25,
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(_ops)
def test_any_history_converges_to_the_desired_state(ops: list[tuple[object, ...]]) -> None:
    fake = FakeIPSet()
    backend = Backend(fake, fake)
    now = [0.0]
    programmer = IPSetsProgrammer(backend.runner, max_size=MAX, clock=lambda: now[0])
    desired: dict[str, tuple[IPSetType, set[str]]] = {}

    def settled() -> dict[str, tuple[IPSetType, set[str]]]:
        # A set whose write failed on its own is quarantined until its retry.
        return {k: v for k, v in desired.items() if k not in programmer.quarantine}

    async def apply() -> bool:
        try:
            await programmer.apply_updates()
            # (Between the two the platform programs iptables.)
            await programmer.apply_deletions()
        except ProgrammingError:
            return False
        return True

    async def body() -> None:
        for op in ops:
            match op:
                case ("replace", str(set_id), IPSetType() as kind, set() as picks):
                    pool = _POOLS[kind]
                    members = {pool[i % len(pool)] for i in picks}
                    desired[set_id] = (kind, members)
                    programmer.replace(IPSet(set_id, kind, frozenset(members)))
                case ("update", str(set_id), set() as adds, set() as dels) if set_id in desired:
                    kind, members = desired[set_id]
                    pool = _POOLS[kind]
                    added = frozenset(pool[i % len(pool)] for i in adds)
                    removed = frozenset(pool[i % len(pool)] for i in dels)
                    members -= removed
                    members |= added
                    programmer.update_members(set_id, added, removed)
                case ("remove", str(set_id)):
                    desired.pop(set_id, None)
                    programmer.remove(set_id)
                case ("apply", int(failures)):
                    fake.fail_restores = failures
                    if await apply():
                        expected = _expected(settled())
                        ours = await backend.ours()
                        assert {k: v for k, v in ours.items() if k in expected} == expected
                    fake.fail_restores = 0
                case ("drift", str(kind), int(index)) if fake.sets:
                    name = sorted(fake.sets)[index % len(fake.sets)]
                    if kind == "destroy":
                        await backend.ipset("destroy", name)
                    elif kind == "flush":
                        await backend.ipset("flush", name)
                    elif fake.sets[name].family == "inet" and fake.sets[name].type == "hash:ip":
                        await backend.ipset("-exist", "add", name, "10.99.0.1")
                    programmer.mark_for_resync()  # the refresh timer fires
        now[0] += 3600.0  # every quarantined set's retry is due
        assert await apply()
        assert await backend.ours() == _expected(desired)

    run(body)


# ---------------------------------------------------------------------------
# The `ipset save` parser and the naming scheme (pure).
# ---------------------------------------------------------------------------

REAL_SAVE = """\
create cali40a hash:net family inet hashsize 1024 maxelem 1048576 bucketsize 12 initval 0x328142cd
add cali40a 10.0.0.1
add cali40a 10.1.0.0/16
create cali60b hash:ip,port family inet6 hashsize 1024 maxelem 1048576 bucketsize 12 initval 0xf7ac81b4
add cali60b fd00::1,sctp:22
add cali60b fd00::1,udp:53
create KUBE-X hash:ip family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0xbef5cbfa
add KUBE-X 10.0.0.2
create cali40cm hash:ip family inet hashsize 1024 maxelem 65536 timeout 0 counters comment bucketsize 12 initval 0x84b5aa77
add cali40cm 1.2.3.4 timeout 0 packets 0 bytes 0 comment "hi there"
"""  # noqa: E501


def test_parse_save_reads_real_output() -> None:
    assert parse_save(REAL_SAVE, is_owned) == {
        "cali40a": KernelSet(SetMeta("hash:net", "inet", MAX), {"10.0.0.1", "10.1.0.0/16"}),
        "cali60b": KernelSet(
            SetMeta("hash:ip,port", "inet6", MAX), {"fd00::1,sctp:22", "fd00::1,udp:53"}
        ),
        "cali40cm": KernelSet(
            SetMeta("hash:ip", "inet", 65536, ("comment", "counters", "timeout 0")), {"1.2.3.4"}
        ),
    }
    assert set(parse_save(REAL_SAVE)) == {"cali40a", "cali60b", "KUBE-X", "cali40cm"}


_token = st.text(st.sampled_from("abcdefxyz0123456789.:,/-_"), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        _token,
        st.tuples(
            st.sampled_from(["hash:ip", "hash:net", "hash:ip,port"]),
            st.sampled_from(["inet", "inet6"]),
            st.integers(1, 1 << 24),
            st.lists(st.sampled_from(["counters", "comment", "timeout 30"]), unique=True),
            st.sets(_token, max_size=6),
        ),
        max_size=5,
    ),
    st.randoms(use_true_random=False),
)  # fmt: skip
def test_parse_save_round_trips_with_noise(
    model: dict[str, tuple[str, str, int, list[str], set[str]]], rnd: random.Random
) -> None:
    lines: list[str] = []
    for name, (kind, family, maxelem, extras, members) in model.items():
        header = [f"family {family}", "hashsize 4096", f"maxelem {maxelem}", *extras,
                  "bucketsize 12", "initval 0x1"]  # fmt: skip
        rnd.shuffle(header)
        lines.append(f"create {name} {kind} {' '.join(header)}" + " " * rnd.randint(0, 2))
        for member in members:
            tail = rnd.choice(["", " timeout 5", ' comment "a b"', " packets 0 bytes 0"])
            lines.append(f"add  {name}\t{member}{tail}")
            if rnd.random() < 0.2:
                lines.append(rnd.choice(["", "# a comment", "COMMIT", "  "]))
    text = rnd.choice(["\n", "\r\n"]).join(lines)
    parsed = parse_save(text)
    assert parsed == {
        name: KernelSet(SetMeta(kind, family, maxelem, tuple(sorted(extras))), members)
        for name, (kind, family, maxelem, extras, members) in model.items()
    }


@given(st.text(min_size=1, max_size=60), st.text(min_size=1, max_size=60))
def test_names_are_short_owned_stable_and_distinct(a: str, b: str) -> None:
    for version in (4, 6):
        names = {main_name(a, version), temp_name(a, version)}
        assert all(len(n) <= MAX_NAME_LEN and is_owned(n) for n in names)
        assert all(" " not in n and "\n" not in n for n in names)
        assert main_name(a, version) == main_name(a, version)
        if a != b:
            assert main_name(a, version) != main_name(b, version)
    assert main_name(a, 4) != main_name(a, 6)
    with pytest.raises(ValueError, match="4 or 6"):
        main_name(a, 5)


def test_a_set_the_kernel_refuses_is_quarantined_and_the_others_land(backend: Backend) -> None:
    async def body() -> None:
        programmer = backend.programmer(max_size=4)
        for s in THREE:
            programmer.replace(s)
        big = [f"10.9.0.{i}" for i in range(1, 7)]  # more than maxelem
        programmer.replace(ipset("big", IP, *big))
        await programmer.apply_updates()
        ((set_id, message),) = programmer.take_refusals()
        assert set_id == "big" and "full" in message
        assert "big" in programmer.quarantine
        state = await backend.ours()

        def same(v: SetState) -> tuple[object, ...]:
            return (v[0], v[1], v[3])  # (maxelem differs: 4 here)

        assert {k: same(v) for k, v in state.items() if k in THREE_STATE} == {
            k: same(v) for k, v in THREE_STATE.items()
        }
        # A later apply does not retry it before its backoff, nor report it again.
        programmer.update_members("ip", frozenset({"10.0.0.7"}), frozenset())
        await programmer.apply_updates()
        assert programmer.take_refusals() == []
        assert "10.0.0.7" in (await backend.ours())[v4("ip")][3]
        # A new value that fits releases it and is programmed exactly.
        programmer.replace(ipset("big", IP, *big[:3]))
        assert "big" not in programmer.quarantine
        await programmer.apply_updates()
        assert (await backend.ours())[v4("big")][3] == frozenset(big[:3])

    run(body)
