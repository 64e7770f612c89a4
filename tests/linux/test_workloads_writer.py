"""WorkloadWriter on nftables: chains shared by policy, interfaces as elements.

No kernel here: the writer fills a table's desired state (chains, and per
interface its map and set elements); ``test_nft_iface_data`` and the kernel
tests prove what the kernel then does with them.
"""

from __future__ import annotations

from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.config import Config
from dataplane.linux.nftables.iface_data import InterfaceData
from dataplane.linux.nftables.reader import ReadElement
from dataplane.linux.nftables.serialise import NftSerialiser
from dataplane.linux.nftables.table import NftTable
from dataplane.linux.nftables.view import NftTableView
from dataplane.linux.owners import find_owner
from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.render.filter import FilterRenderer
from dataplane.linux.render.rule import RuleRenderer
from dataplane.linux.render.shared_workloads import FROM_MAP, SOURCES, TO_MAP
from dataplane.linux.rules.marks import Marks
from dataplane.linux.writers.shapes import SetProgrammer
from dataplane.linux.writers.target import Target
from dataplane.linux.writers.workloads import WorkloadWriter
from dataplane.model import (
    DirectionPolicy,
    EffectivePolicy,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)


class _NoKernel:
    """The writer never reaches the kernel: nothing here is applied."""

    def __call__(self, changes: object) -> None:
        raise AssertionError("no element is written here")

    def elements(self, family: int, table: str, set_name: str) -> list[ReadElement]:
        raise AssertionError("nothing is read here")

    def rules(self, family: int, table: str) -> list[Any]:
        raise AssertionError("nothing is read here")

    def set_names(self, family: int, table: str) -> list[str]:
        raise AssertionError("nothing is read here")


def _target() -> tuple[Target[Any], NftTableView, InterfaceData]:
    data = InterfaceData(2, "cali", _NoKernel(), _NoKernel())
    view = NftTableView(NftTable("ip", "cali", cast("Any", None), data=data), "filter", 4)
    marks = Marks.from_mask(0xFFFF0000)
    names = ChainNames()
    render = FilterRenderer(
        4,
        Config(),
        marks,
        names,
        RuleRenderer(4, marks, lambda *_: None, "calico-packet"),
        NftSerialiser(4, marks, "filter-"),
    )
    target = Target(
        (4,),
        Config(),
        names,
        {("filter", 4): view},
        cast("SetProgrammer", None),
        {("filter", 4): render},
        {},
    )
    return target, view, data


def _endpoint(name: str, iface: str, **fields: Any) -> WorkloadEndpoint:
    return WorkloadEndpoint(
        WorkloadEndpointKey("k8s", f"ns/{name}", "eth0"),
        iface,
        ipv4_nets=("10.65.0.1/32",),
        **fields,
    )


def test_endpoints_with_one_policy_share_chains_and_the_last_one_out_removes_them() -> None:
    target, view, data = _target()
    writer = WorkloadWriter()
    same = EffectivePolicy(ingress=DirectionPolicy(profiles=("kns.a",)))
    other = EffectivePolicy(egress=DirectionPolicy(profiles=("kns.b",)))
    a, b = _endpoint("a", "cali-a"), _endpoint("b", "cali-b")
    c = _endpoint("c", "cali-c", state="inactive")
    writer.set(a, same)
    writer.set(b, same)
    writer.set(c, other)
    writer.write(target, everything=True)

    reaches = data.wanted_chains(TO_MAP)
    assert reaches["cali-a"] == reaches["cali-b"] != reaches["cali-c"]
    shared = reaches["cali-a"].removeprefix("filter-")
    assert writer.sharing(4, shared) == {a.key, b.key}
    owner = find_owner(
        shared,
        None,
        names=ChainNames(),
        policies={},
        profiles={},
        workloads=writer,
        hosts=[],
        users=cast("Any", None),
        service_of=lambda _: None,
        sharing=lambda chain: writer.sharing(4, chain),
    )
    assert (owner.kind, owner.endpoints) == ("workload endpoint", frozenset({a.key, b.key}))
    assert owner.name == f"{a.key} and 1 more"
    # Each interface's allowed sources, and a down endpoint's chain drops all.
    assert set(data.wanted_chains(FROM_MAP)) == {"cali-a", "cali-b", "cali-c"}
    assert data.has_elements(SOURCES, "cali-a")
    down = view.desired(reaches["cali-c"].removeprefix("filter-"))
    assert down is not None and [r.text for r in down[0]] == ["counter drop"]

    # b leaves: its elements go, the chain stays for a; a leaves: it goes.
    writer.remove(b.key)
    writer.write(target, everything=False)
    assert "cali-b" not in data.wanted_chains(TO_MAP)
    assert not data.has_elements(SOURCES, "cali-b")
    assert view.desired(shared) is not None
    writer.remove(a.key)
    writer.write(target, everything=False)
    assert view.desired(shared) is None
    assert writer.sharing(4, shared) == frozenset()


_POLICIES = [
    EffectivePolicy(),
    EffectivePolicy(ingress=DirectionPolicy(profiles=("kns.a",))),
    EffectivePolicy(egress=DirectionPolicy(profiles=("kns.b",))),
]
_history = st.lists(
    st.one_of(
        st.tuples(
            st.just("set"),
            st.integers(0, 3),  # which endpoint
            st.sampled_from(["cali-a", "cali-b", "cali-c"]),
            st.integers(0, len(_POLICIES) - 1),
        ),
        st.tuples(st.just("remove"), st.integers(0, 3)),
        st.tuples(st.just("write"), st.booleans()),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(_history)
def test_the_table_holds_exactly_the_shared_chains_some_interface_reaches(
    history: list[tuple[Any, ...]],
) -> None:
    """Counted, not found by a walk: after every write each interface in use
    has its map elements, and the shared chains are exactly those the maps
    reach (one left over would be a leak, one missing a broken jump)."""
    bare, bare_view, _ = _target()
    WorkloadWriter().write(bare, everything=True)
    fixed = set(bare_view._chains)  # the dispatch chains, there whatever the endpoints

    target, view, data = _target()
    writer = WorkloadWriter()
    endpoints: dict[int, WorkloadEndpoint] = {}
    for op in [*history, ("write", False)]:
        if op[0] == "set":
            _, n, iface, policy = op
            endpoints[n] = _endpoint(f"pod{n}", iface)
            writer.set(endpoints[n], _POLICIES[policy])
        elif op[0] == "remove":
            endpoints.pop(op[1], None)
            writer.remove(_endpoint(f"pod{op[1]}", "").key)
        else:
            writer.write(target, everything=op[1])
            to_map, from_map = data.wanted_chains(TO_MAP), data.wanted_chains(FROM_MAP)
            in_use = {endpoint.name for endpoint in endpoints.values()}
            assert set(to_map) == set(from_map) == in_use
            reached = {c.removeprefix("filter-") for c in [*to_map.values(), *from_map.values()]}
            assert view._chains - fixed == reached
