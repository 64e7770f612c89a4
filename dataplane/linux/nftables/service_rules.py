"""The services table's fixed part: its sets, maps, chains and rules. Pure.

Made once (and re-asserted after a restart or a resync) by one ``nft -f``
transaction; after that only elements change
(:mod:`~dataplane.linux.nftables.service_layout` says what each set
means, :mod:`~dataplane.linux.nftables.service_table` writes them). One
rule per slot count picks a frontend's slot, in each of two banks.

ClientIP affinity: the client's backend is remembered by the packet path
in dynamic maps (``aff_addr``/``aff_port``, keyed by client and
frontend) and looked up before the slots; what is recorded, and for how
long, is one rule per distinct timeout in use and protocol, which is the
only structure a service can add (once per new timeout value). For IPv6
the record rules are written through netlink into ``aff-record``
(``affinity_records``), which this script makes and jumps to.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

__all__ = [
    "AFFINITY_MAPS",
    "AFFINITY_PROTOCOLS",
    "AFFINITY_SIZE",
    "BANK",
    "EXACT",
    "FRONTEND_SETS",
    "MAPS",
    "MAX_SLOTS",
    "RECORD_CHAIN",
    "element_sets",
    "expected_rules",
    "live_set",
    "rule_id",
    "slot_count",
    "slot_counts",
    "structure",
]

EXACT = 32  # backends up to this many get one slot each: exactly equal odds
MAX_SLOTS = 1 << 16
# Slots of the second bank: the same keys, this far up.
BANK = MAX_SLOTS
# Sets each frontend may be in; "np_" + name for node ports.
FRONTEND_SETS = ("fe", "ext_local", "masq", "masq_local", "refused", "dropped", "dropped_outside")
MAPS = ("addr", "port", "local_addr", "local_port")
# Written by the packet path (client . frontend -> backend), never by us
# but for a sweep: not among element_sets(), so a resync does not flush them.
AFFINITY_MAPS = ("aff_addr", "aff_port", "np_aff_addr", "np_aff_port")
# The kernel's default for a dynamic map is 65,535 entries: clients times
# affinity frontends on one node. When full, a new client is balanced
# without being remembered (as xt_recent forgets its oldest).
AFFINITY_SIZE = 1 << 18
AFFINITY_PROTOCOLS = ("tcp", "udp", "sctp")
# IPv6: the chain the record rules go in, written through netlink
# (``affinity_records``): nft 1.0.6 cannot write them.
RECORD_CHAIN = "aff-record"


def live_set(timeout: int, *, node_port: bool) -> str:
    """The set of (frontend . backend) pairs an affinity frontend with
    ``timeout`` records: a pair gone from it is never recorded again."""
    return f"{'np_' if node_port else ''}aff_live_{timeout}"


def slot_counts() -> tuple[int, ...]:
    """Every slot count a frontend can have: one rule and one set each."""
    big = []
    count = 1 << (EXACT * (EXACT + 1) - 1).bit_length()
    while count <= MAX_SLOTS:
        big.append(count)
        count <<= 1
    return (*range(1, EXACT + 1), *big)


def slot_count(backends: int) -> int:
    """How many slots a frontend with ``backends`` backends gets (0: none)."""
    if backends <= EXACT:
        return backends
    return min(MAX_SLOTS, 1 << (backends * EXACT - 1).bit_length())


def element_sets() -> tuple[str, ...]:
    """Every set and map of the table but the pools: what a service's
    elements fill, and the second bank's sets."""
    names = [*FRONTEND_SETS, *MAPS, "fe1", "lfe1", "aff"]
    for n in slot_counts():
        names += [f"fe_{n}", f"lfe_{n}", f"fe1_{n}", f"lfe1_{n}"]
    return (*names, *(f"np_{n}" for n in names), "hairpin", "remote", "fw", "fw_allowed")


def rule_id(rule: str) -> str:
    """The comment a rule of the table carries: what it says, hashed. Read
    back, the comments of a chain's rules show that it holds exactly them,
    in order (a refresh, and a restart that finds the table in place)."""
    return "svc:" + hashlib.sha256(rule.encode()).hexdigest()[:16]


def expected_rules(script: str) -> dict[str, list[str]]:
    """Per chain, the comments of the rules a :func:`structure` script writes."""
    out: dict[str, list[str]] = {}
    for line in script.splitlines():
        if line.startswith("add rule "):
            words = line.split(maxsplit=5)
            out.setdefault(words[4], []).append(line.rsplit('comment "', 1)[1].rstrip('"'))
    return out


def structure(
    version: int,
    table: str,
    masq_mark: int,
    pools: Sequence[str],
    timeouts: Sequence[int] = (),
) -> str:
    """The ``nft -f`` script that makes the table (or re-asserts it): every
    set and map declared (``add`` leaves an existing one and its
    elements alone), every chain flushed and written again, the IP
    pools' prefixes replaced. One transaction. ``timeouts``: the ClientIP
    affinity timeouts in use (see :func:`_affinity`)."""
    ip = "ip" if version == 4 else "ip6"
    t = f"{ip} {table}"
    routed = f"{ip} daddr . meta l4proto . th dport"
    node = "meta l4proto . th dport"
    lines = [f"add table {t}"]

    def declare(kind: str, name: str, body: str) -> None:
        lines.append(f"add {kind} {t} {name} {{ {body}; }}")

    declare(
        "set",
        "pools",
        f"type {'ipv4_addr' if version == 4 else 'ipv6_addr'}; flags interval",
    )
    for prefix, key in (("", routed), ("np_", node)):
        for name in FRONTEND_SETS:
            declare("set", f"{prefix}{name}", f"typeof {key}")
        for name in ("fe1", "lfe1"):
            declare("set", f"{prefix}{name}", f"typeof {key}")
        for n in slot_counts():
            for name in ("fe", "lfe", "fe1", "lfe1"):
                declare("set", f"{prefix}{name}_{n}", f"typeof {key}")
        for name in MAPS:
            value = f"{ip} daddr" if name.endswith("addr") else "th dport"
            declare("map", f"{prefix}{name}", f"typeof {key} . numgen random mod 2 : {value}")
    declare("set", "fw", f"typeof {routed}")
    declare("set", "fw_allowed", f"typeof {routed} . {ip} saddr; flags interval")
    declare("set", "hairpin", f"typeof {ip} saddr . {ip} daddr")
    declare("set", "remote", f"typeof {ip} daddr")
    lookups, records = _affinity(version, declare, timeouts)
    # IPv6: made and emptied here, filled through netlink after this script.
    netlink: dict[str, tuple[str | None, list[str]]] = {}
    if version == 6 and timeouts:
        netlink[RECORD_CHAIN] = (None, [])
    lines.append(f"flush set {t} pools")
    if pools:
        lines.append(f"add element {t} pools {{ {', '.join(pools)} }}")

    mark = f"0x{masq_mark:x}"
    set_mark = f"meta mark set meta mark | {mark}"
    outside = f"{ip} saddr != @pools fib saddr type != local"

    def pick(key: str, prefix: str, counts: str, maps: str, bank: int = 0) -> list[str]:
        rules = []
        offset = f" offset {BANK}" if bank else ""
        for n in slot_counts():
            slot = f"{key} . symhash mod {n}{offset}"
            rules.append(
                f"{key} @{prefix}{counts}{bank or ''}_{n} dnat {ip} to {slot}"
                f" map @{prefix}{maps}addr : {slot} map @{prefix}{maps}port"
            )
        return rules

    chains: dict[str, tuple[str | None, list[str]]] = {
        "nat-prerouting": ("type nat hook prerouting priority -100", ["jump services"]),
        "nat-output": ("type nat hook output priority -100", ["jump services"]),
        "services": (
            None,
            [
                f"{routed} @fe jump routed",
                f"fib daddr type local {node} @np_fe jump nodeports",
            ],
        ),
        **netlink,
        "nat-postrouting": (
            "type nat hook postrouting priority 100",
            [
                *records,  # before masquerade, which ends the chain
                f"meta mark & {mark} == {mark} masquerade",
                f"ct status dnat {ip} saddr . {ip} daddr @hairpin masquerade",
                f"ct status dnat {ip} daddr @remote {ip} saddr != @pools masquerade",
            ],
        ),
        "filter-prerouting": (
            "type filter hook prerouting priority -110",
            [
                "ct state new jump firewall",
                "ct state new jump drops",
                "ct state new jump drops-outside",
            ],
        ),
        "filter-output": (
            "type filter hook output priority -110",
            [
                "ct state new jump firewall",
                "ct state new jump drops",
                "ct state new jump rejects",
            ],
        ),
        "filter-forward": (
            "type filter hook forward priority -10",
            ["ct state new jump rejects"],
        ),
        "filter-input": ("type filter hook input priority -10", ["ct state new jump rejects"]),
        "firewall": (None, [f"{routed} @fw {routed} . {ip} saddr != @fw_allowed drop"]),
        "drops": (
            None,
            [f"{routed} @dropped drop", f"fib daddr type local {node} @np_dropped drop"],
        ),
        "drops-outside": (
            None,
            [
                f"{ip} saddr @pools return",
                "fib saddr type local return",
                f"{routed} @dropped_outside drop",
                f"fib daddr type local {node} @np_dropped_outside drop",
            ],
        ),
        "rejects": (
            None,
            [f"{routed} @refused reject", f"fib daddr type local {node} @np_refused reject"],
        ),
    }
    for prefix, key, name in (("", routed, "routed"), ("np_", node, "nodeports")):
        chains[name] = (
            None,
            [
                f"{key} @{prefix}ext_local {outside} goto {name}-outside",
                f"{key} @{prefix}masq_local {ip} saddr != @pools {set_mark}",
                f"{key} @{prefix}masq {set_mark}",
                *lookups[prefix],
                f"{key} @{prefix}fe1 goto {name}-1",
                *pick(key, prefix, "fe", ""),
            ],
        )
        chains[f"{name}-1"] = (None, pick(key, prefix, "fe", "", bank=1))
        chains[f"{name}-outside"] = (
            None,
            [
                *lookups[prefix],
                f"{key} @{prefix}lfe1 goto {name}-outside-1",
                *pick(key, prefix, "lfe", "local_"),
            ],
        )
        chains[f"{name}-outside-1"] = (None, pick(key, prefix, "lfe", "local_", bank=1))
    # Chains first (jumps need their targets), then their rules.
    for name, (hook, _) in chains.items():
        body = f" {{ {hook}; policy accept; }}" if hook else ""
        lines.append(f"add chain {t} {name}{body}")
    for name, (_, rules) in chains.items():
        lines.append(f"flush chain {t} {name}")
        lines.extend(f'add rule {t} {name} {rule} comment "{rule_id(rule)}"' for rule in rules)
    return "\n".join(lines) + "\n"


def _affinity(
    version: int, declare: Callable[[str, str, str], None], timeouts: Sequence[int]
) -> tuple[dict[str, list[str]], list[str]]:
    """ClientIP affinity's sets, maps and rules: per key prefix ("" routed,
    "np_" node ports) the lookup that sends a remembered client to its
    backend, and the rules that remember, after DNAT.

    The lookup runs before the slots and falls through for a client with
    no entry. The record runs in srcnat, where ``ct original`` still
    holds the frontend and ``ip daddr`` the backend chosen, and only for a
    pair in the frontend's live set; ``ct original proto-dst`` is typed
    only after a protocol match, hence one rule per protocol. For IPv6
    nft 1.0.6 aborts on those updates (a key over 16 bytes): the record
    rules are a jump to :data:`RECORD_CHAIN`, which ``affinity_records``
    fills.
    """
    lookups: dict[str, list[str]] = {"": [], "np_": []}
    records: list[str] = []
    ip = "ip" if version == 4 else "ip6"
    routed, node = f"{ip} daddr . meta l4proto . th dport", "meta l4proto . th dport"
    original = {
        "": f"ct original {ip} daddr . meta l4proto . ct original proto-dst",
        "np_": "meta l4proto . ct original proto-dst",
    }
    for prefix, key in (("", routed), ("np_", node)):
        declare("set", f"{prefix}aff", f"typeof {key}")
        for name, value in (("addr", f"{ip} daddr"), ("port", "th dport")):
            declare(
                "map",
                f"{prefix}aff_{name}",
                f"typeof {ip} saddr . {key} : {value}; flags dynamic,timeout; size {AFFINITY_SIZE}",
            )
        client = f"{ip} saddr . {key}"
        lookups[prefix].append(
            f"{key} @{prefix}aff dnat {ip} to {client} map @{prefix}aff_addr"
            f" : {client} map @{prefix}aff_port"
        )
        for timeout in sorted(set(timeouts)):
            live = live_set(timeout, node_port=bool(prefix))
            declare("set", live, f"typeof {key} . {ip} daddr . th dport")
            if version == 6:
                continue
            seen = f"ip saddr . {original[prefix]} timeout {timeout}s"
            records += [
                f"meta l4proto {protocol} ct status dnat"
                f" {original[prefix]} . ip daddr . th dport @{live}"
                f" update @{prefix}aff_addr {{ {seen} : ip daddr }}"
                f" update @{prefix}aff_port {{ {seen} : th dport }}"
                for protocol in AFFINITY_PROTOCOLS
            ]
    if version == 6 and timeouts:
        records.append(f"jump {RECORD_CHAIN}")
    return lookups, records
