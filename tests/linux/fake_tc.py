"""A fake of ``ip`` (links) and ``tc`` (qdiscs, ingress filters) for the shaping programmer.

It holds links (name -> MTU), each device's root qdisc and ``ingress``
qdisc, and each device's ingress redirect; it answers ``-j`` reads from
that state and applies ``-batch`` lines to it, refusing (as the tools do,
``Command failed -:N``) a device that does not exist or a command it does
not model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from dataplane.linux.kernel.cmd import CommandResult

__all__ = ["FakeTrafficControl"]

_TBF = re.compile(
    r"tbf rate (\d+)bit burst (\d+)b latency \d+ms(?: peakrate (\d+)bit minburst (\d+)b)?"
)


class FakeTrafficControl:
    def __init__(self, links: dict[str, int] | None = None) -> None:
        self.links: dict[str, int] = dict(links or {})
        self.root: dict[str, dict[str, Any]] = {}  # device -> root qdisc (tc -j shape)
        self.ingress: set[str] = set()
        self.redirects: dict[str, str] = {}  # device -> IFB device
        self.batches = 0

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        args = list(argv)
        if "-batch" in args:
            self.batches += 1
            return self._batch(args[0], (stdin or b"").decode().splitlines())
        if args[:3] == ["ip", "-j", "link"]:
            return _json([{"ifname": n, "mtu": m} for n, m in self.links.items()])
        if args[:3] == ["tc", "-j", "qdisc"]:
            qdiscs = [{"dev": d, "root": True, **q} for d, q in self.root.items()]
            qdiscs += [{"dev": d, "kind": "ingress", "handle": "ffff:"} for d in self.ingress]
            return _json(qdiscs)
        if args[:3] == ["tc", "-j", "filter"]:
            ifb = self.redirects.get(args[5])
            actions = [{"kind": "mirred", "to_dev": ifb}] if ifb else []
            return _json([{"kind": "u32", "options": {"actions": actions}}] if ifb else [])
        return CommandResult(1, b"", f"{args[0]}: not modelled: {args}".encode())

    def _batch(self, tool: str, lines: list[str]) -> CommandResult:
        errors = []
        for number, line in enumerate(lines, 1):
            if not self._one(tool, line.split()):
                errors.append(f"Command failed -:{number}")
        return CommandResult(1 if errors else 0, b"", "\n".join(errors).encode())

    def _one(self, tool: str, words: list[str]) -> bool:
        if tool == "ip":
            name = words[2]
            if words[:2] == ["link", "add"]:
                self.links[name] = int(words[4])
                return True
            if words[:2] == ["link", "set"]:
                return name in self.links
            if words[:2] == ["link", "del"] and name in self.links:
                del self.links[name]
                for table in (self.root, self.redirects):
                    table.pop(name, None)
                self.ingress.discard(name)
                return True
            return False
        dev = words[3]
        if dev not in self.links:
            return False
        text = " ".join(words)
        if words[:2] == ["qdisc", "replace"] and (found := _TBF.search(text)):
            rate, burst, peak, minburst = found.groups()
            options = {"rate": int(rate) // 8, "burst": int(burst)}
            if peak:
                options["minburst"] = int(minburst)
            self.root[dev] = {"kind": "tbf", "options": options}
            return True
        if words[:2] == ["qdisc", "del"]:
            return self.root.pop(dev, None) is not None if words[4] == "root" else self._unhook(dev)
        if words[:2] == ["qdisc", "add"] and dev not in self.ingress:
            self.ingress.add(dev)
            return True
        if words[:2] == ["filter", "del"] and dev in self.ingress:
            self.redirects.pop(dev, None)
            return True
        if words[:2] == ["filter", "add"] and dev in self.ingress and words[-1] in self.links:
            self.redirects[dev] = words[-1]
            return True
        return False

    def _unhook(self, dev: str) -> bool:
        if dev not in self.ingress:
            return False
        self.ingress.discard(dev)
        self.redirects.pop(dev, None)
        return True


def _json(value: object) -> CommandResult:
    return CommandResult(0, json.dumps(value).encode(), b"")
