"""What our rules say in a node, on either backend (for kernel tests' checks).

iptables holds them in the four tables of whichever iptables tool the
driver chose; native nftables in our own tables (``cali`` and
``cali-svc`` per family). These read both, so a test checks the same fact
whichever backend the driver ran.
"""

from __future__ import annotations

import json
import re
from typing import Any

from testbed.topology import Node

__all__ = ["NFT_TABLES", "nft_state", "our_rules", "rule_packets"]

NFT_TABLES = tuple((family, table) for family in ("ip", "ip6") for table in ("cali", "cali-svc"))
_IPTABLES = (
    "iptables-legacy-save",
    "ip6tables-legacy-save",
    "iptables-nft-save",
    "ip6tables-nft-save",
)
_NFT_COUNTER = re.compile(r"counter packets (\d+) bytes \d+")
_IPT_COUNTER = re.compile(r"^\[(\d+):\d+\]")


def _nft_listing(node: Node) -> str:
    out = []
    for family, table in NFT_TABLES:
        listed = node.run("nft", "list", "table", family, table, check=False)
        if listed.returncode == 0:
            out.append(listed.stdout)
    return "\n".join(out)


def our_rules(node: Node) -> str:
    """Every iptables tool's save and our nftables tables, as text."""
    saved = [node.run(tool, check=False).stdout for tool in _IPTABLES]
    return "\n".join([*saved, _nft_listing(node)])


def rule_packets(node: Node, comment: str) -> int:
    """Packets the rules carrying ``comment`` matched (both families, either backend)."""
    total = 0
    for tool in _IPTABLES:
        for line in node.run(tool, "-c", check=False).stdout.splitlines():
            found = _IPT_COUNTER.match(line)
            if found and comment in line:
                total += int(found.group(1))
    for line in _nft_listing(node).splitlines():
        found = _NFT_COUNTER.search(line)
        if found and comment in line:
            total += int(found.group(1))
    return total


def _canonical(value: Any) -> Any:
    """``value`` without what changes from run to run: handles, counters,
    element order (a hash set lists in the order of its random seed). Lists
    are sorted whole, the table's objects too: a rule's place is in its
    identity comment (the hash of its chain, text and every rule before it)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == "handle":
                continue
            if key == "counter" and isinstance(item, dict):
                out[key] = {"packets": 0, "bytes": 0}
            else:
                out[key] = _canonical(item)
        return out
    if isinstance(value, list):
        items = [_canonical(v) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    return value


def nft_state(node: Node) -> str:
    """Our nftables tables, canonical (see :func:`_canonical`): equal text,
    equal tables."""
    parts = []
    for family, table in NFT_TABLES:
        listed = node.run("nft", "-j", "list", "table", family, table, check=False)
        if listed.returncode != 0:
            continue
        objects = json.loads(listed.stdout)["nftables"]
        kept = [o for o in objects if "metainfo" not in o]
        parts.append(f"== nft {family} {table}\n" + json.dumps(_canonical(kept), sort_keys=True))
    return "\n".join(parts)
