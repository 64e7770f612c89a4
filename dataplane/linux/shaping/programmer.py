"""ShapingProgrammer: each workload's bandwidth limits as qdiscs, filters and IFB devices.

It makes the kernel match the plan (interface -> :class:`Shaping`), the
way :mod:`dataplane.linux.shaping.buckets` describes, and nothing else of
the node's traffic control: only the root TBF and the ``ingress`` qdisc of
the interfaces of this node's workloads, and the ``bwcali*`` IFB devices,
are its own. Each apply reads what the kernel holds (``ip -j link``,
``tc -j qdisc``, and the ingress filters of each interface it shapes
egress of) and writes only the difference, in one ``ip -batch`` and one
``tc -batch``: so a refresh that finds a qdisc deleted, changed or added
by hand puts it back as planned, and a driver restarted finds its own
work done. An IFB device no workload needs any more goes (a pod's veth
takes its qdiscs with it, but not its IFB device).

An interface that does not exist yet is waited for (the link monitor's
``links_changed`` brings the next apply); what the kernel refuses is held
back by interface, said once, and retried at the next apply.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dataplane.core.quarantine import Unsaid
from dataplane.linux.kernel.cmd import CommandRunner
from dataplane.linux.shaping.buckets import (
    IFB_PREFIX,
    Shaping,
    TokenBucket,
    ifb_name,
    token_bucket,
)
from dataplane.model import Bandwidth

__all__ = ["Shaping", "ShapingProgrammer"]

log = logging.getLogger(__name__)

_FAILED = re.compile(r"Command failed -:(\d+)")


@dataclass(slots=True)
class _Held:
    """What the kernel holds of ours and of the workloads' interfaces."""

    mtu: dict[str, int]  # every link's MTU, by name
    root: dict[str, dict[str, Any]]  # device -> its root qdisc (tc -j)
    ingress: set[str]  # devices with an ingress qdisc


def _held(links: list[dict[str, Any]], qdiscs: list[dict[str, Any]]) -> _Held:
    held = _Held({link["ifname"]: int(link.get("mtu", 1500)) for link in links}, {}, set())
    for q in qdiscs:
        dev = q.get("dev", "")
        if q.get("root"):
            held.root[dev] = q
        elif q.get("kind") == "ingress":
            held.ingress.add(dev)
    return held


def _tbf_held(held: _Held, dev: str, bucket: TokenBucket) -> bool:
    root = held.root.get(dev)
    return root is not None and root.get("kind") == "tbf" and bucket.held_by(root["options"])


class ShapingProgrammer:
    def __init__(self, runner: CommandRunner) -> None:
        self._runner = runner
        self._plan: Mapping[str, Shaping] = {}  # every workload interface
        self._wanted: dict[str, Shaping] = {}  # those with a limit
        self._dirty = True  # the first apply reads: a restart adopts or clears
        self._cleared = False  # nothing of ours was left at the last apply
        self.failing: dict[str, str] = {}  # interface -> why, as of the last apply
        self._unsaid: Unsaid[str] = Unsaid()

    def set_plan(self, plan: Mapping[str, Shaping]) -> None:
        """Every workload interface's limits. Only a change to a limited
        one (or a limit gone) needs the kernel read: a pod without limits
        coming or going costs nothing here."""
        self._plan = plan
        wanted = {iface: s for iface, s in plan.items() if s.ingress or s.egress}
        if wanted != self._wanted:
            self._wanted = wanted
            self._dirty = True

    def mark_for_resync(self) -> None:
        """Read the kernel back at the next apply (refresh timer)."""
        if self._wanted or not self._cleared:
            self._dirty = True

    def links_changed(self) -> None:
        """A link came or went: an interface waited for may be here."""
        if self.failing:
            self._dirty = True

    async def cleanup_all(self, interfaces: list[str]) -> None:
        """Remove every limit from ``interfaces`` and every IFB device of ours."""
        self._plan, self._wanted, self._dirty = dict.fromkeys(interfaces, Shaping()), {}, True
        await self.apply()

    def held_back(self) -> dict[str, str]:
        return dict(self.failing)

    def take_refusals(self) -> list[tuple[str, str]]:
        return self._unsaid.news(self.failing)

    async def apply(self) -> None:
        if not self._dirty and not self.failing:
            return
        self._dirty = False
        links = await self._json(["ip", "-j", "link", "show"])
        qdiscs = await self._json(["tc", "-j", "qdisc", "show"])
        held = _held(links, qdiscs)
        failing: dict[str, str] = {}
        add_links: list[str] = []
        tc: list[tuple[str, str]] = []  # (interface, command)
        for iface, shaping in sorted(self._plan.items()):
            if iface not in held.mtu:
                if iface not in self._wanted:
                    continue
                failing[iface] = "no such interface yet; shaped once it exists"
                continue
            mtu = held.mtu[iface]
            tc += [(iface, c) for c in self._ingress(held, iface, shaping.ingress, mtu)]
            if shaping.egress is None:
                if iface in held.ingress:
                    tc.append((iface, f"qdisc del dev {iface} ingress"))
                continue
            ifb = ifb_name(iface)
            if ifb not in held.mtu:
                add_links += [f"link add {ifb} mtu {mtu} type ifb", f"link set {ifb} up"]
            bucket = token_bucket(shaping.egress, mtu)
            if not _tbf_held(held, ifb, bucket):
                tc.append((iface, f"qdisc replace dev {ifb} root handle 1: {bucket.tc_args()}"))
            if iface not in held.ingress:
                tc.append((iface, f"qdisc add dev {iface} handle ffff: ingress"))
            fresh = iface not in held.ingress
            if not await self._redirects(iface, ifb, fresh=fresh):
                if not fresh:
                    tc.append((iface, f"filter del dev {iface} ingress"))
                tc.append(
                    (
                        iface,
                        f"filter add dev {iface} parent ffff: protocol all prio 1 u32"
                        f" match u32 0 0 flowid 1:1 action mirred egress redirect dev {ifb}",
                    )
                )
        wanted_ifbs = {ifb_name(i) for i, s in self._wanted.items() if s.egress is not None}
        stale = [n for n in held.mtu if n.startswith(IFB_PREFIX) and n not in wanted_ifbs]
        if add_links:
            await self._batch(
                ["ip", "-force", "-batch", "-"], [("", c) for c in add_links], failing
            )
        if tc:
            await self._batch(["tc", "-force", "-batch", "-"], tc, failing)
        if stale:
            deletes = [("", f"link del {n}") for n in stale]
            await self._batch(["ip", "-force", "-batch", "-"], deletes, failing)
        self.failing = failing
        self._cleared = not self._wanted

    def _ingress(self, held: _Held, iface: str, bandwidth: Bandwidth | None, mtu: int) -> list[str]:
        """The commands that leave ``iface``'s root qdisc as ``bandwidth`` wants."""
        root = held.root.get(iface)
        if bandwidth is None:
            # Only a TBF is ours to remove (as Felix): any other root qdisc is not.
            return [f"qdisc del dev {iface} root"] if root and root.get("kind") == "tbf" else []
        bucket = token_bucket(bandwidth, mtu)
        if _tbf_held(held, iface, bucket):
            return []
        return [f"qdisc replace dev {iface} root handle 1: {bucket.tc_args()}"]

    async def _redirects(self, iface: str, ifb: str, *, fresh: bool) -> bool:
        """Whether ``iface``'s ingress filters are exactly our one redirect to ``ifb``."""
        if fresh:
            return False
        filters = await self._json(["tc", "-j", "filter", "show", "dev", iface, "ingress"])
        targets = [
            action.get("to_dev")
            for f in filters
            for action in f.get("options", {}).get("actions", ())
            if action.get("kind") == "mirred"
        ]
        return targets == [ifb]

    async def _json(self, argv: list[str]) -> list[dict[str, Any]]:
        result = await self._runner.run(argv)
        text = result.stdout.decode() or "[]"
        parsed = json.loads(text)
        return parsed if isinstance(parsed, list) else []

    async def _batch(
        self, argv: list[str], commands: list[tuple[str, str]], failing: dict[str, str]
    ) -> None:
        """Run ``commands`` in one process; each refused one's interface held back."""
        stdin = "".join(f"{command}\n" for _, command in commands).encode()
        result = await self._runner.run(argv, stdin=stdin, check=False)
        if result.returncode == 0:
            return
        err = result.stderr.decode(errors="replace").strip()
        lines = [int(n) for n in _FAILED.findall(err)] or [len(commands)]
        for number in lines:
            iface, command = commands[min(number, len(commands)) - 1]
            why = f"{argv[0]} refused {command!r}: {err.splitlines()[0] if err else 'failed'}"
            failing[iface or command.split()[2]] = why
