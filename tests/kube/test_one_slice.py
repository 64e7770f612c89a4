"""A service of one slice takes a shorter way to its backends (nothing to
merge): on every slice it takes it, the backends are exactly those of the
merging way, which ``test_semantics`` holds to kube-proxy's choice."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.kube import endpoints
from dataplane.kube.endpoints import NodeInfo, parse_slice
from tests.kube.test_semantics import NODES, ZONES, _endpoints, _slice

ports = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(["http", "dns", ""]),
            "port": st.sampled_from([53, 8080, 9090]),
            "protocol": st.sampled_from(["TCP", "UDP"]),
        }
    ),
    max_size=3,
)


@settings(max_examples=500, deadline=None)
@given(
    listed=ports,
    eps=st.lists(_endpoints(), max_size=8),
    distinct=st.booleans(),
    node=st.builds(NodeInfo, st.sampled_from(NODES), st.sampled_from(("", *ZONES))),
)
def test_one_slice_has_the_backends_the_merge_makes(
    listed: list[dict[str, Any]], eps: list[dict[str, Any]], distinct: bool, node: NodeInfo
) -> None:
    if distinct:  # the case the shorter way takes: every address once
        eps = [{**e, "addresses": [f"10.65.1.{i + 1}"]} for i, e in enumerate(eps)]
    parsed = parse_slice(_slice("a", "IPv4", listed, *eps))
    assert parsed is not None
    assert endpoints.backends([parsed], node) == endpoints._merged([parsed], node)


def test_the_common_slice_takes_the_shorter_way() -> None:
    eps = [{"addresses": [f"10.65.1.{i}"], "nodeName": "n2"} for i in (3, 1, 2)]
    parsed = parse_slice(_slice("a", "IPv4", [{"name": "http", "port": 8080}], *eps))
    assert parsed is not None
    alone = endpoints._one_slice(parsed, NodeInfo("n1"))
    assert alone is not None
    assert [b.address for b in alone] == ["10.65.1.1", "10.65.1.2", "10.65.1.3"]
