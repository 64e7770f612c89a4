"""A prefix set's ranges: each prefix read as ipaddress reads it, and the
merged ranges kept as members come and go equal to those worked out whole."""

from __future__ import annotations

import ipaddress

from hypothesis import example, given, settings
from hypothesis import strategies as st

from dataplane.linux.nftables.prefix_ranges import PrefixRanges, merged, range_item, span


def _ipaddress_span(member: str) -> tuple[int, int] | str:
    """What ``ipaddress`` makes of one member: its [start, end), or its error."""
    try:
        net = ipaddress.ip_network(member)
    except ValueError as exc:
        return type(exc).__name__
    return int(net.network_address), int(net.broadcast_address) + 1


def _span_or_error(member: str, version: int) -> tuple[int, int] | str:
    try:
        return span(member, version)
    except ValueError as exc:
        return type(exc).__name__


def _network(address: str, length: int) -> str:
    return str(ipaddress.ip_network(f"{address}/{length}", strict=False))


_v4_text = st.ip_addresses(v=4).map(str)
_v6_text = st.ip_addresses(v=6).map(str)
_length = st.one_of(
    st.integers(0, 129).map(str),
    st.sampled_from(["", "032", "-1", "+8", "1e1", "\u0663", " 8", "8 ", "x"]),
)
_members = st.one_of(
    # Canonical CIDRs, as the managers hand them on.
    st.builds(_network, _v4_text, st.integers(0, 32)),
    st.builds(_network, _v6_text, st.integers(0, 128)),
    # Host bits, other lengths, no length, the other family, odd text.
    st.builds(lambda a, n: f"{a}/{n}" if n else a, st.one_of(_v4_text, _v6_text), _length),
    st.text(alphabet="0123456789abcdef.:/%x \x00", max_size=24),
)


@settings(max_examples=500, deadline=None)
@given(_members, st.sampled_from([4, 6]))
# Lengths int() reads and ipaddress does not, on addresses with no host bits.
@example("0.0.0.0/\u0663", 4)
@example("::/\u0663", 6)
@example("0.0.0.0/+0", 4)
@example("::/ 0", 6)
def test_a_members_range_is_what_ipaddress_reads_or_refuses(member: str, version: int) -> None:
    """The fast parse of a prefix (inet_pton) agrees with ipaddress on
    every text, read or refused, whichever family it is asked for."""
    assert _span_or_error(member, version) == _ipaddress_span(member)


def _toggle_and_compare(
    ranges: PrefixRanges, members: set[str], member: str, version: int, held: frozenset[bytes]
) -> frozenset[bytes]:
    """Add ``member`` if absent, else remove it; then the items kept must be
    those of the members merged from scratch, and what they changed since
    ``held`` (the last items handed out) exactly the difference. Returns
    the items handed out now."""
    if member in members:
        members.discard(member)
        ranges.remove(member)
    else:
        members.add(member)
        ranges.add(member)
    whole = merged(sorted(span(m, version) for m in members))
    expected = {range_item(s, e, version) for s, e in whole}
    assert set(ranges.items) == expected
    want, delta = ranges.items.against(held)
    assert want == expected
    if delta is not None:
        assert delta == (want - held, held - want)
    return want


_POOL = [
    "10.0.0.0/24",
    "10.0.1.0/24",
    "10.0.0.128/25",
    "10.0.0.0/16",
    "10.0.2.0/23",
    "10.0.4.0/24",
    "10.0.0.7/32",
    "0.0.0.0/0",
    "255.255.255.255/32",
    "255.255.255.0/24",
]
_POOL6 = ["fd00::/64", "fd00:0:0:1::/64", "fd00::/48", "ffff:ffff:ffff:ffff::/64", "::/0"]


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from([(4, _POOL), (6, _POOL6)]),
    st.frozensets(st.integers(0, 9)),
    st.lists(st.integers(0, 9), max_size=30),
)
def test_ranges_kept_member_by_member_are_the_ranges_worked_out_whole(
    family: tuple[int, list[str]], first: frozenset[int], toggles: list[int]
) -> None:
    """Each toggle adds a member absent, removes one present (nested,
    touching, overlapping, the whole family, the last address): the items
    kept are always those of the members merged from scratch."""
    version, pool = family
    members = {pool[i % len(pool)] for i in first}
    ranges = PrefixRanges(version, members)
    held: frozenset[bytes] = frozenset()
    for i in toggles:
        held = _toggle_and_compare(ranges, members, pool[i % len(pool)], version, held)


_nested = st.builds(
    lambda n, length: str(ipaddress.ip_network(f"10.0.{n >> 8}.{n & 255}/{length}", strict=False)),
    st.integers(0, 2**12 - 1),
    st.integers(20, 28),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_nested, min_size=1, max_size=12, unique=True), st.lists(st.integers(0, 11)))
def test_ranges_of_many_nested_and_touching_prefixes_follow_any_toggles(
    pool: list[str], toggles: list[int]
) -> None:
    """The same over drawn prefixes of one /20: most nest in or touch others."""
    members: set[str] = set()
    ranges = PrefixRanges(4, members)
    held: frozenset[bytes] = frozenset()
    for i in toggles:
        held = _toggle_and_compare(ranges, members, pool[i % len(pool)], 4, held)
