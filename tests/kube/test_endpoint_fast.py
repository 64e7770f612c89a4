"""The common endpoint takes a shorter way into the model (no call per
field): on every input, valid or not, it gives what the checked way
gives -- the same endpoint, the same refusal, or none."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.errors import InputError
from dataplane.kube.endpoints import SliceEndpoint, _endpoint, _endpoint_checked

# Canonical and not: leading zeros, too few octets, out of range, IPv6,
# spaces, not a string at all.
ADDRESSES = [
    "10.65.1.2", "0.0.0.0", "255.255.255.255", "010.65.1.2", "10.65.1", "10.65.1.256",
    "10.65.1.2 ", "10.65.1.2\x00", "fd00::1", "FD00:0::1", "::ffff:10.1.2.3", "", "pod", 7, None,
]  # fmt: skip
FLAGS = [True, False, None, "true", 1, 0]
missing = object()  # a key left out


def _dict(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not missing}


conditions = st.one_of(
    st.builds(
        _dict,
        ready=st.sampled_from([*FLAGS, missing]),
        serving=st.sampled_from([*FLAGS, missing]),
        terminating=st.sampled_from([*FLAGS, missing]),
    ),
    st.sampled_from([None, [], "ready", missing]),
)
hints = st.sampled_from(
    [missing, None, {}, [], "zone-a", {"forZones": [{"name": "zone-a"}]}, {"forNodes": 3}]
)
endpoints = st.one_of(
    st.builds(
        _dict,
        addresses=st.one_of(
            st.lists(st.sampled_from(ADDRESSES), max_size=2), st.sampled_from([None, "1.2.3.4"])
        ),
        conditions=conditions,
        hints=hints,
        nodeName=st.sampled_from([missing, None, "", "node-1", "node-2", 5]),
    ),
    st.sampled_from([None, [], "endpoint", 3]),
)


def _outcome(
    made: Callable[[Any, int, int], SliceEndpoint | None], raw: Any, family: int
) -> SliceEndpoint | str | None:
    try:
        return made(raw, family, 2)
    except InputError as exc:
        return f"refused: {exc}"


@settings(max_examples=2000, deadline=None)
@given(raw=endpoints, family=st.sampled_from([4, 6]))
def test_the_short_way_gives_what_the_checked_way_gives(raw: Any, family: int) -> None:
    assert _outcome(_endpoint, raw, family) == _outcome(_endpoint_checked, raw, family)


def test_the_common_endpoint_takes_the_short_way() -> None:
    """The case the short way exists for, as the API server writes it."""
    raw = {
        "addresses": ["10.65.1.2"],
        "conditions": {"ready": True, "serving": True, "terminating": False},
        "nodeName": "node-1",
    }
    made = _endpoint(raw, 4, 0)
    assert made == _endpoint_checked(raw, 4, 0)
    again = _endpoint({**raw}, 4, 1)
    assert made is not None and again is not None
    assert made.node_name is again.node_name  # one string for every endpoint of a node
