"""The floor of a programmed node: its state saved, then loaded by the plain tools.

What a node's driver programmed (its IP sets, iptables rules or nftables
tables, and routes) is saved in the tools' own formats by :func:`save`
inside the node's namespace; :func:`load` then times ``ipset restore``,
``iptables-restore`` / ``ip6tables-restore`` (or one ``nft -f``) and
``ip -batch`` of the routes in a fresh namespace holding the same
interfaces. The sum is the least any program could take to write that
state: the benchmarks' *floor*. Per-interface sysctls are not in it.

Backends: ``legacy`` and ``nft`` (the two iptables), ``nftables`` (our
native tables).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from benchmarks._common import timed_tool

__all__ = ["load", "nft_save", "save"]

NFT_TABLES = ("cali", "cali-svc")  # in both families


def _sh(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, check=True).stdout.decode()


def nft_save(out: Path) -> dict[str, int]:
    """The nftables backend's counterpart of the iptables and ipset saves."""
    present = set(_sh(["nft", "list", "tables"]).splitlines())

    def table(family: str, name: str) -> str:
        # With IPv6 off (Felix's IPv6Support false) the ip6 tables are not made.
        if f"table {family} {name}" not in present:
            return ""
        return _sh(["nft", "list", "table", family, name])

    script = "".join(table(family, name) for family in ("ip", "ip6") for name in NFT_TABLES)
    (out / "nft.save").write_text(script)
    v4, v6 = (table(family, "cali") for family in ("ip", "ip6"))

    def rules(text: str) -> int:
        return sum(1 for x in text.splitlines() if x.startswith("\t\t") and "cali:" in x)

    return {
        "rules_v4": rules(v4),
        "rules_v6": rules(v6),
        "chains_v4": sum(1 for x in v4.splitlines() if x.startswith("\tchain ")),
        "sets": sum(1 for text in (v4, v6) for x in text.splitlines() if x.startswith("\tset ")),
        "members": 0,  # elements are listed many to a line: not counted
        "bytes_nft": len(script),
    }


def _routes(route_protocol: int) -> list[str]:
    routes: list[str] = []
    for family in ("-4", "-6"):
        text = _sh(["ip", "-j", family, "route", "show", "table", "main"])
        for r in json.loads(text or "[]"):
            if r.get("protocol") not in (str(route_protocol), route_protocol):
                continue
            scope = " scope link" if family == "-4" else ""
            routes.append(f"route add {r['dst']} dev {r['dev']} proto {route_protocol}{scope}")
    return routes


def save(backend: str, out: Path, route_protocol: int) -> dict[str, int]:
    """Save what is programmed in this namespace into ``out``; what it holds, counted.

    Routes are those of ``route_protocol`` (the driver's own) in the main table.
    """
    routes = _routes(route_protocol)
    (out / "routes.batch").write_text("".join(f"{line}\n" for line in routes))
    if backend == "nftables":
        return nft_save(out) | {"routes": len(routes)}
    v4 = _sh([f"iptables-{backend}-save"])
    v6 = _sh([f"ip6tables-{backend}-save"])
    sets = _sh(["ipset", "save"])
    (out / "iptables.save").write_text(v4)
    (out / "ip6tables.save").write_text(v6)
    (out / "ipset.save").write_text(sets)
    return {
        "rules_v4": sum(1 for x in v4.splitlines() if x.startswith("-A ")),
        "rules_v6": sum(1 for x in v6.splitlines() if x.startswith("-A ")),
        "chains_v4": sum(1 for x in v4.splitlines() if x.startswith(":")),
        "sets": sum(1 for x in sets.splitlines() if x.startswith("create ")),
        "members": sum(1 for x in sets.splitlines() if x.startswith("add ")),
        "routes": len(routes),
        "bytes_iptables": len(v4) + len(v6),
        "bytes_ipset": len(sets),
    }


def load(backend: str, saved: Path) -> dict[str, dict[str, Any]]:
    """Load what :func:`save` wrote into this (fresh) namespace: each tool's seconds,
    and a count of what is now here to show it took.

    Raises:
        RuntimeError: the namespace already holds tables, sets or rules.
    """
    if backend == "nftables":
        if _sh(["nft", "list", "tables"]).strip():
            raise RuntimeError("floor namespace is not empty: it holds nftables tables")
        floor = {
            "nft": timed_tool(["nft", "-f", "-"], saved / "nft.save"),
            "routes": timed_tool(["ip", "-batch", "-"], saved / "routes.batch"),
        }
        check = {"rules_v4": _sh(["nft", "list", "table", "ip", "cali"]).count("cali:")}
        return {"floor": floor, "check": check}
    # A fresh namespace holds none of it; make sure, and never touch anything else.
    leftovers = _sh(["ipset", "list", "-name"]).split()
    rules = _sh([f"iptables-{backend}-save"]).count("\n-A ")
    if leftovers or rules:
        raise RuntimeError(f"floor namespace is not empty: {leftovers[:5]} {rules} rules")
    floor = {
        "ipset": timed_tool(["ipset", "restore"], saved / "ipset.save"),
        "iptables": timed_tool([f"iptables-{backend}-restore"], saved / "iptables.save"),
        "ip6tables": timed_tool([f"ip6tables-{backend}-restore"], saved / "ip6tables.save"),
        "routes": timed_tool(["ip", "-batch", "-"], saved / "routes.batch"),
    }
    check = {
        "rules_v4": _sh([f"iptables-{backend}-save"]).count("\n-A "),
        "members": _sh(["ipset", "save"]).count("\nadd "),
    }
    return {"floor": floor, "check": check}
