"""HostsManager: master's host messages become one Host per node; only changes out.

Older releases' split messages are merged before the manager, in the wire
layer (tests/test_wire_releases.py).
"""

from __future__ import annotations

import pytest
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st

from dataplane.errors import InputError
from dataplane.managers import HostsManager
from dataplane.model.hosts import Encapsulation, Host
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.conftest import run_trio


class ChangeSink:
    """Holds what it is handed and fails on anything that is not a real change."""

    def __init__(self) -> None:
        self.hosts: dict[str, Host] = {}
        self.encapsulation: Encapsulation | None = None
        self.calls = 0

    def set_host(self, host: Host) -> None:
        assert self.hosts.get(host.name) != host, f"unchanged host handed over: {host}"
        self.hosts[host.name] = host
        self.calls += 1

    def remove_host(self, name: str) -> None:
        assert name in self.hosts, f"removal of a host never handed over: {name}"
        del self.hosts[name]
        self.calls += 1

    def set_encapsulation(self, encapsulation: Encapsulation) -> None:
        assert encapsulation != self.encapsulation
        self.encapsulation = encapsulation
        self.calls += 1


def apply(*msgs: Message) -> tuple[HostsManager, ChangeSink]:
    sink = ChangeSink()
    manager = HostsManager(sink)
    for msg in msgs:
        manager.on_update(msg)
    manager.complete_deferred_work()
    return manager, sink


def test_todays_felix_sends_both_addresses_in_cidr_form() -> None:
    _, sink = apply(
        pb.HostMetadataUpdate(
            hostname="node-b",
            ipv4_addr="192.168.1.12/24",
            ipv6_addr="fd00:192:168:1:0::12/64",
            asnumber="64512",
            labels={"zone": "a"},
        )
    )
    assert sink.hosts == {
        "node-b": Host(
            "node-b",
            "192.168.1.12",
            "fd00:192:168:1::12",
            24,
            64,
            "64512",
            (("zone", "a"),),
        )
    }


def test_an_update_replaces_the_whole_node_and_a_remove_removes_it() -> None:
    manager, sink = apply(
        pb.HostMetadataUpdate(hostname="node-b", ipv4_addr="192.168.1.12/24", labels={"a": "1"})
    )
    manager.on_update(pb.HostMetadataUpdate(hostname="node-b", ipv6_addr="fd00::12/64"))
    manager.complete_deferred_work()
    assert sink.hosts["node-b"] == Host("node-b", ipv6="fd00::12", ipv6_prefix=64)
    manager.on_update(pb.HostMetadataRemove(hostname="node-b"))
    manager.on_update(pb.HostMetadataRemove(hostname="node-c"))  # never seen: nothing
    manager.complete_deferred_work()
    assert sink.hosts == {}


def test_encapsulation_is_handed_over_when_it_changes() -> None:
    manager, sink = apply(pb.Encapsulation(vxlan_enabled=True))
    assert sink.encapsulation == Encapsulation(vxlan=True)
    calls = sink.calls
    manager.on_update(pb.Encapsulation(vxlan_enabled=True))
    manager.complete_deferred_work()
    assert sink.calls == calls  # the same again: nothing


@pytest.mark.parametrize(
    ("msg", "field", "value"),
    [
        (pb.HostMetadataUpdate(hostname="", ipv4_addr="192.168.1.12"), "hostname", ""),
        (
            pb.HostMetadataUpdate(hostname="b", ipv4_addr="192.168.1.300"),
            "ipv4_addr",
            "192.168.1.300",
        ),
        (pb.HostMetadataUpdate(hostname="b", ipv4_addr="fd00::1"), "ipv4_addr", "fd00::1"),
        (pb.HostMetadataUpdate(hostname="b", ipv6_addr="10.0.0.1"), "ipv6_addr", "10.0.0.1"),
        (
            pb.HostMetadataUpdate(hostname="b", ipv6_addr="fd00::1/129"),
            "ipv6_addr",
            "fd00::1/129",
        ),
        (pb.HostMetadataUpdate(hostname="b", labels={"": "x"}), "labels", ""),
    ],
)
def test_bad_input_names_the_field_and_changes_nothing(
    msg: Message, field: str, value: str
) -> None:
    manager, sink = apply(pb.HostMetadataUpdate(hostname="b", ipv4_addr="192.168.1.12"))
    before = dict(sink.hosts)
    with pytest.raises(InputError) as info:
        manager.on_update(msg)
    assert (info.value.field, info.value.value) == (field, value)
    manager.complete_deferred_work()
    assert sink.hosts == before


_NAMES = st.sampled_from(["a", "b", "c"])
_OPS = st.lists(
    st.one_of(
        st.builds(
            pb.HostMetadataUpdate,
            hostname=_NAMES,
            ipv4_addr=st.sampled_from(["", "10.0.0.1", "10.0.0.2/24"]),
            ipv6_addr=st.sampled_from(["", "fd00::1", "fd00::2/64"]),
        ),
        st.builds(pb.HostMetadataRemove, hostname=_NAMES),
    ),
    max_size=30,
)


@given(_OPS, st.integers(1, 5))
def test_the_sink_always_ends_equal_to_the_managers_view(ops: list[Message], every: int) -> None:
    """However the updates are batched, the platform ends with what the manager holds."""
    sink = ChangeSink()
    manager = HostsManager(sink)
    for i, msg in enumerate(ops):
        manager.on_update(msg)
        if i % every == 0:
            manager.complete_deferred_work()
    manager.complete_deferred_work()
    assert sink.hosts == _reference(ops)


def _address(text: str) -> tuple[str, int]:
    address, _, length = text.partition("/")
    return address, int(length or 0)


def _reference(ops: list[Message]) -> dict[str, Host]:
    """Felix's semantics, written out plainly."""
    hosts: dict[str, Host] = {}
    for msg in ops:
        name = msg.hostname  # type: ignore[attr-defined]
        if isinstance(msg, pb.HostMetadataRemove):
            hosts.pop(name, None)
        else:
            assert isinstance(msg, pb.HostMetadataUpdate)
            ipv4, p4 = _address(msg.ipv4_addr) if msg.ipv4_addr else ("", 0)
            ipv6, p6 = _address(msg.ipv6_addr) if msg.ipv6_addr else ("", 0)
            hosts[name] = Host(name, ipv4, ipv6, p4, p6)
    return hosts


def test_the_loop_hands_hosts_to_the_platform() -> None:
    platform = SimPlatform()

    async def main() -> None:
        from dataplane.core.loop import Dataplane  # noqa: PLC0415

        dp = Dataplane(platform)
        for msg in (
            pb.HostMetadataUpdate(hostname="node-b", ipv4_addr="192.168.1.12/24"),
            pb.Encapsulation(vxlan_enabled=True),
            pb.InSync(),
        ):
            dp.send_message(msg)
        dp.close_input()
        await dp.run()

    run_trio(main)
    assert platform.desired.hosts == {"node-b": Host("node-b", "192.168.1.12", ipv4_prefix=24)}
    assert platform.desired.encapsulation == Encapsulation(vxlan=True)
