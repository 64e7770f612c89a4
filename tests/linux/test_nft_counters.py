"""Reading the per-rule counters of our nft table (the policy counters' nftables source)."""

from __future__ import annotations

from dataplane.linux.nftables.counters import parse_counters

LISTING = """table ip cali {
\tset cali40-s:web {
\t\ttype ipv4_addr
\t\telements = { 10.65.0.2 }
\t}
\tchain filter-cali-pi-web {
\t\tip saddr @cali40-s:web counter packets 7 bytes 420 accept comment "cali:AAAAAAAAAAAAAAAA rule 0"
\t\tcounter packets 3 bytes 180 drop comment "cali:BBBBBBBBBBBBBBBB"
\t\tcounter packets 9 bytes 9 accept
\t}
\tchain raw-cali-PREROUTING {
\t\tcounter packets 5 bytes 5 accept comment "cali:CCCCCCCCCCCCCCCC"
\t}
\tchain filter-FORWARD {
\t\ttype filter hook forward priority filter; policy accept;
\t\tcounter packets 1 bytes 2 jump filter-cali-FORWARD comment "cali:DDDDDDDDDDDDDDDD"
\t}
}
"""


def test_counted_rules_of_the_filter_view_by_their_iptables_chain() -> None:
    assert list(parse_counters(LISTING)) == [
        ("cali-pi-web", "AAAAAAAAAAAAAAAA", 7, 420),
        ("cali-pi-web", "BBBBBBBBBBBBBBBB", 3, 180),
        ("FORWARD", "DDDDDDDDDDDDDDDD", 1, 2),
    ]


def test_another_view_and_a_set_are_not_the_filter_tables() -> None:
    assert list(parse_counters(LISTING, "raw")) == [("cali-PREROUTING", "CCCCCCCCCCCCCCCC", 5, 5)]
    assert list(parse_counters("table ip cali {\n}\n")) == []
