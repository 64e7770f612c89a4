"""``explain`` as a command and as the live driver's ``/explain``.

The evaluation itself is :func:`dataplane.ops.explain.explain`, over the
desired model; here only the query is read (from the command line or the
URL) and checked, and the source chosen: a live driver answers from its
last published snapshot, a log is replayed first.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dataplane.ops.commands import (
    SourceError,
    fetch_json,
    not_in_sync_line,
    replay_snapshot,
    source_address,
)
from dataplane.ops.objects import Snapshot
from dataplane.ops.observer import Observer

__all__ = ["Query", "explain_handler", "run_explain"]

_PROTOCOLS = frozenset({"tcp", "udp", "icmp", "sctp"})


@dataclass(frozen=True, slots=True)
class Query:
    src: str
    dst: str
    proto: str
    port: int | None

    @classmethod
    def parse(cls, src: str, dst: str, proto: str, port: str | int | None) -> Query:
        """A checked query.

        Raises:
            ValueError: an address that is not one, an unknown protocol, a bad port.
        """
        a, b = ipaddress.ip_address(src), ipaddress.ip_address(dst)
        if a.version != b.version:
            raise ValueError(f"--from {src} and --to {dst} are not of one IP family")
        if proto not in _PROTOCOLS:
            raise ValueError(f"protocol {proto!r}: expected one of {', '.join(sorted(_PROTOCOLS))}")
        number = None if port in (None, "") else int(port)
        if number is not None and not 0 < number < 65536:
            raise ValueError(f"port {number}: out of range")
        if number is not None and proto == "icmp":
            raise ValueError("icmp has no port")
        if number is None and proto != "icmp":
            raise ValueError(f"{proto} needs --port: policy and services match on it")
        return cls(str(a), str(b), proto, number)

    def evaluate(self, snap: Snapshot, platform: str | None = None) -> dict[str, Any]:
        """The explanation as JSON, with its text under ``text``.

        ``platform`` is whose service semantics apply (default: the
        snapshot's; the in-memory platform's are Linux's).

        Raises:
            ValueError: the evaluator cannot answer this query (e.g. no port).
        """
        # Loaded at the first query: a driver nobody asks never pays for it.
        from dataplane.ops.explain import explain  # noqa: PLC0415

        # ICMP in IPv6 is its own protocol; the operator says "icmp" for both.
        proto = "icmpv6" if self.proto == "icmp" and ":" in self.src else self.proto
        icmp_type = (128 if ":" in self.src else 8) if self.proto == "icmp" else None
        result = explain(
            snap.state,
            self.src,
            self.dst,
            proto,
            self.port,
            icmp_type=icmp_type,
            icmp_code=0 if icmp_type is not None else None,
            endpoint_to_host_action=snap.config.default_endpoint_to_host_action,
            platform=platform or snap.platform,
        )
        body: dict[str, Any] = result.to_json()
        body["text"] = result.to_text()
        body["in_sync"] = snap.in_sync
        body["waiting"] = snap.waiting
        if not snap.in_sync:
            body["text"] = f"{not_in_sync_line(snap.waiting)}\n{body['text']}"
        return body

    def url_query(self) -> str:
        params = {"from": self.src, "to": self.dst, "proto": self.proto}
        if self.port is not None:
            params["port"] = str(self.port)
        return urllib.parse.urlencode(params)


def explain_handler(observer: Observer) -> Any:
    """``/explain?from=IP&to=IP&proto=P[&port=N]`` from the last published state."""

    def handle(query: Mapping[str, Sequence[str]]) -> tuple[int, dict[str, Any]]:
        def one(name: str) -> str:
            values = query.get(name, [])
            return values[0] if values else ""

        try:
            parsed = Query.parse(one("from"), one("to"), one("proto"), one("port") or None)
            return 200, parsed.evaluate(observer.snapshot())
        except ValueError as exc:
            return 400, {"error": str(exc)}

    return handle


def run_explain(args: argparse.Namespace) -> int:
    try:
        query = Query.parse(args.src, args.dst, args.proto, args.port)
    except ValueError as exc:
        print(f"{args.prog} explain: {exc}", file=sys.stderr)
        return 2
    try:
        if args.log is not None:
            snap, _ = replay_snapshot(
                args.log, max_frame_bytes=args.max_frame_bytes, release=args.felix_release
            )
            # A log says nothing of the node it came from: --platform does.
            body = query.evaluate(snap, "windows" if args.platform == "windows" else "linux")
        else:
            status, body = fetch_json(source_address(args), f"/explain?{query.url_query()}")
            if status != 200:
                raise SourceError(f"/explain answered {status}: {body.get('error', body)}")
    except (SourceError, ValueError) as exc:
        print(f"{args.prog} explain: {exc}", file=sys.stderr)
        return 2
    text = body.pop("text")
    if args.json:
        json.dump(body, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    # Not in sync: the verdict is of what was received, not the kernel's.
    return 0 if body.get("in_sync", True) else 1
