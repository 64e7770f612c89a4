"""The services table's fixed part: its sets, maps, chains and rules. Pure.

Made once (and re-asserted after a restart or a resync) by one ``nft -f``
transaction; after that only elements change
(:mod:`~dataplane.linux.nftables.service_layout` says what each set
means, :mod:`~dataplane.linux.nftables.service_table` writes them). One
rule per slot count picks a frontend's slot, in each of two banks.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "BANK",
    "EXACT",
    "FRONTEND_SETS",
    "MAPS",
    "MAX_SLOTS",
    "element_sets",
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
    names = [*FRONTEND_SETS, *MAPS, "fe1", "lfe1"]
    for n in slot_counts():
        names += [f"fe_{n}", f"lfe_{n}", f"fe1_{n}", f"lfe1_{n}"]
    return (*names, *(f"np_{n}" for n in names), "hairpin", "remote", "fw", "fw_allowed")


def structure(version: int, table: str, masq_mark: int, pools: Sequence[str]) -> str:
    """The ``nft -f`` script that makes the table (or re-asserts it): every
    set and map declared (``add`` leaves an existing one and its
    elements alone), every chain flushed and written again, the IP
    pools' prefixes replaced. One transaction."""
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
        "nat-postrouting": (
            "type nat hook postrouting priority 100",
            [
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
                f"{key} @{prefix}fe1 goto {name}-1",
                *pick(key, prefix, "fe", ""),
            ],
        )
        chains[f"{name}-1"] = (None, pick(key, prefix, "fe", "", bank=1))
        chains[f"{name}-outside"] = (
            None,
            [
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
        lines.extend(f"add rule {t} {name} {rule}" for rule in rules)
    return "\n".join(lines) + "\n"
