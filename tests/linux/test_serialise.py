"""Both serialisers on every term and action of the rule model, and what they refuse.

The kernel-parser tests (``test_render_kernel``, ``test_render_nft``) hold
whole renderings to the kernel; this pins each term's spelling in both
syntaxes and the misuses a renderer bug would make.
"""

from __future__ import annotations

import pytest

from dataplane.linux.iptables.serialise import IptablesSerialiser
from dataplane.linux.nftables.serialise import NftSerialiser, collapse
from dataplane.linux.rules.action import (
    Accept,
    Dnat,
    Drop,
    Goto,
    Jump,
    Log,
    Masquerade,
    Notrack,
    Reject,
    Return,
    SetMark,
    Snat,
)
from dataplane.linux.rules.marks import Marks
from dataplane.linux.rules.match import (
    Addresses,
    ConnState,
    Icmp,
    InSet,
    Interface,
    LocalAddress,
    MarkMatch,
    Match,
    Port,
    Ports,
    Protocol,
    SetKind,
    Side,
)
from dataplane.linux.rules.rule import Origin, TableRule
from dataplane.model import IcmpMatch, PortRange

MARKS = Marks.from_mask(0xFFFF0000)
IPT = IptablesSerialiser(MARKS)
NFT = NftSerialiser(4, MARKS)

# term -> (iptables, nft)
TERMS: list[tuple[Match, str, str]] = [
    (Protocol("tcp"), "-p tcp", "meta l4proto tcp"),
    (Protocol("icmpv6", negate=True), "! -p ipv6-icmp", "meta l4proto != ipv6-icmp"),
    (Addresses(Side.SRC, ("10.0.0.0/8",)), "-s 10.0.0.0/8", "ip saddr 10.0.0.0/8"),
    (
        Addresses(Side.DST, ("10.0.0.0/8", "10.1.0.0/16", "192.168.1.7/24"), negate=True),
        "-m mark --mark 0x0/0x200000",
        "ip daddr != { 10.0.0.0/8, 192.168.1.0/24 }",
    ),
    (InSet(Side.SRC, "s1"), "-m set --match-set s1 src", "ip saddr @s1"),
    (
        InSet(Side.DST, "p1", SetKind.ADDRESS_PORTS, negate=True),
        "-m set ! --match-set p1 dst,dst",
        "ip daddr . meta l4proto . th dport != @p1",
    ),
    (
        Ports(Side.DST, (PortRange(80, 80), PortRange(8000, 8100))),
        "-m multiport --dports 80,8000:8100",
        "th dport { 80, 8000-8100 }",
    ),
    (Icmp(4, IcmpMatch(8)), "-m icmp --icmp-type 8", "icmp type 8"),
    (
        Icmp(4, IcmpMatch(3, 1), negate=True),
        "-m icmp ! --icmp-type 3/1",
        "icmp type . icmp code != { 3 . 1 }",
    ),
    (MarkMatch.has(0x10), "-m mark --mark 0x10/0x10", "meta mark & 0x10 == 0x10"),
    (MarkMatch.lacks(0x10), "-m mark --mark 0x0/0x10", "meta mark & 0x10 == 0x0"),
    (
        ConnState(("RELATED", "ESTABLISHED")),
        "-m conntrack --ctstate RELATED,ESTABLISHED",
        "ct state { related, established }",
    ),
    (
        ConnState(("INVALID",), negate=True),
        "-m conntrack ! --ctstate INVALID",
        "ct state != invalid",
    ),
    (Interface("cali+", inbound=True), "-i cali+", 'iifname "cali*"'),
    (Port(Side.DST, 4789), "--dport 4789", "th dport 4789"),
    (LocalAddress(Side.DST), "-m addrtype --dst-type LOCAL", "fib daddr type local"),
    (
        LocalAddress(Side.SRC, negate=True, out_interface=True),
        "-m addrtype ! --src-type LOCAL --limit-iface-out",
        "fib saddr . oif type != local",
    ),
    (Interface("eth0", inbound=False, negate=True), "! -o eth0", 'oifname != "eth0"'),
]

ACTIONS = [
    (Accept(), "-j ACCEPT", "accept"),
    (Drop(), "-j DROP", "drop"),
    (Return(), "-j RETURN", "return"),
    (Jump("cali-x"), "-j cali-x", "jump cali-x"),
    (Goto("cali-x"), "-g cali-x", "goto cali-x"),
    (
        SetMark.on(0x10),
        "-j MARK --set-xmark 0x10/0x10",
        "meta mark set meta mark & 0xffffffef | 0x10",
    ),
    (SetMark.off(0x30), "-j MARK --set-xmark 0x0/0x30", "meta mark set meta mark & 0xffffffcf"),
    (SetMark(0xFFFFFFFF, 0x5), "-j MARK --set-xmark 0x5/0xffffffff", "meta mark set 0x5"),
    (Reject(), "-j REJECT", "reject"),
    (Notrack(), "-j NOTRACK", "notrack"),
    (Dnat("10.0.0.1"), "-j DNAT --to-destination 10.0.0.1", "dnat to 10.0.0.1"),
    (Snat("fd00::1"), "-j SNAT --to-source fd00::1", "snat to fd00::1"),
    (Masquerade(), "-j MASQUERADE", "masquerade"),
    (Masquerade((1024, 2048)), "-j MASQUERADE --to-ports 1024-2048", "masquerade to :1024-2048"),
    (Masquerade((1024, 1024)), "-j MASQUERADE --to-ports 1024", "masquerade to :1024"),
    (Log("p: "), '-j LOG --log-prefix "p: " --log-level 5', 'log prefix "p: " level notice'),
]


@pytest.mark.parametrize(("term", "ipt", "nft"), TERMS)
def test_each_term_in_both_syntaxes(term: Match, ipt: str, nft: str) -> None:
    assert IPT.rule(TableRule((term,), Drop()))[-1].match == ipt
    # Every nft rule counts (as every iptables rule does): the counter last before the verdict.
    assert NFT.rule(TableRule((term,), Drop()))[-1].text == f"{nft} counter drop"


@pytest.mark.parametrize(("action", "ipt", "nft"), ACTIONS)
def test_each_action_in_both_syntaxes(action: Accept, ipt: str, nft: str) -> None:
    assert IPT.rule(TableRule((), action))[-1].action == ipt
    assert NFT.rule(TableRule((), action))[-1].text == f"counter {nft}".strip()


def test_an_or_iptables_cannot_say_is_a_mark_block_ending_in_the_counted_rule() -> None:
    origin = Origin("t", "p", "inbound", "0", "allow")
    rule = TableRule(
        (Protocol("tcp"), Ports(Side.DST, (PortRange(80, 80),), ("np",))),
        Drop(),
        comment="c",
        origin=origin,
        counts=True,
    )
    ipt = IPT.rule(rule)
    assert [r.text() for r in ipt] == [
        "-j MARK --set-xmark 0x0/0x800000",
        "-p tcp -m multiport --dports 80 -j MARK --set-xmark 0x800000/0x800000",
        "-p tcp -m set --match-set np dst,dst -j MARK --set-xmark 0x800000/0x800000",
        "-p tcp -m mark --mark 0x800000/0x800000 -j DROP",
    ]
    nft = NFT.rule(rule)
    assert [r.written() for r in nft] == [
        "meta mark set meta mark & 0xff7fffff",
        "meta l4proto tcp th dport 80 meta mark set meta mark & 0xff7fffff | 0x800000",
        "meta l4proto tcp ip daddr . meta l4proto . th dport @np"
        " meta mark set meta mark & 0xff7fffff | 0x800000",
        'meta l4proto tcp meta mark & 0x800000 == 0x800000 counter drop comment "c"',
    ]
    for rendered in (ipt, nft):
        assert all(r.origin == origin for r in rendered)
        assert [r.counts for r in rendered] == [False, False, False, True]


def test_misuses_are_refused_not_spelled() -> None:
    two_ors = TableRule(
        (
            Addresses(Side.SRC, ("10.0.0.0/8", "11.0.0.0/8")),
            Addresses(Side.SRC, ("12.0.0.0/8", "13.0.0.0/8")),
        )
    )
    with pytest.raises(ValueError, match="scratch mark"):
        IPT.rule(two_ors)
    for bad in (Addresses(Side.SRC, ()), Ports(Side.DST)):
        with pytest.raises(ValueError, match="matches nothing"):
            IPT.rule(TableRule((bad,)))
        with pytest.raises(ValueError, match="matches nothing"):
            NFT.rule(TableRule((bad,)))
    # Names nft cannot spell, or that would end the quoted string.
    for term in (InSet(Side.SRC, "cali40s:web"), Ports(Side.DST, named=("a b",))):
        with pytest.raises(ValueError, match="not an nft name"):
            NFT.rule(TableRule((term,)))
    for target in ("x;drop", "."):  # a lone dot is nft's concatenation (found drawing tables)
        with pytest.raises(ValueError, match="not an nft name"):
            NFT.rule(TableRule((), Jump(target)))
    with pytest.raises(ValueError, match="not an interface name"):
        NFT.rule(TableRule((Interface('eth0" accept', inbound=True),)))
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 address"):
        NFT.rule(TableRule((), Dnat("10.0.0.1 accept")))
    # An OR in a table without scratch marks (nat) is a renderer's bug.
    with pytest.raises(ValueError, match="scratch mark bits"):
        IptablesSerialiser().rule(TableRule((Addresses(Side.SRC, ("10.0.0.0/8", "11.0.0.0/8")),)))
    # (nft says that one with a set; ports or named ports it cannot.)
    either = Ports(Side.DST, (PortRange(80, 80),), ("np",))
    with pytest.raises(ValueError, match="scratch mark bits"):
        NftSerialiser(4).rule(TableRule((Protocol("tcp"), either)))


def test_comments_are_labels_in_nft_too() -> None:
    rule = NFT.rule(TableRule((), Drop(), comment='tier x"; accept # \n' + "y" * 300))[-1]
    text = rule.written("cali:0123456789abcdef")
    assert text.startswith('counter drop comment "cali:0123456789abcdef tier x__ accept _ _yyy')
    assert text.count('"') == 2 and "\n" not in text and len(text) < 200


def test_collapse_keeps_the_meaning_of_a_set_of_networks() -> None:
    assert collapse(["10.1.0.0/16", "10.0.0.0/8", "10.0.0.5/32"]) == ["10.0.0.0/8"]
    assert collapse(["192.168.0.7/24", "192.168.1.0/24"]) == ["192.168.0.0/23"]
    assert collapse(["fd00::1/8"]) == ["fd00::/8"]
