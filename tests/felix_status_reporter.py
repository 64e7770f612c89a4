"""A fake of Felix's endpoint-status file reporter, fed what the driver sends.

Felix (v3.30 and later, ``felix/statusrep``) runs this reporter under an
external driver too, but what reaches it passes Felix's connector first
(``felix/dataplane/external/ext_dataplane.go``), whose ``RecvMessage``
maps only the five status payloads and drops the rest, ``DataplaneInSync``
among them. The reporter reconciles files only after ``DataplaneInSync``,
so for an external driver it never writes one: ``external=True`` (the
default) models that. Its semantics otherwise, the same in v3.30, v3.31,
v3.32 and master, are the independent oracle of the files the driver
writes in Felix's place:

* name: orchestrator, workload and endpoint id, each escaped as Go's
  ``url.PathEscape`` does, joined by single spaces;
* content: compact JSON of the endpoint the update carries (``ifaceName``,
  ``mac``, ``ipv4Nets``, ``ipv6Nets``, ``bgpPeerName``; empty ones left out);
* an update without the endpoint is skipped (Felix logs an error); ``up``
  writes the file, ``down`` or a remove deletes it, ``error`` leaves it;
* from ``DataplaneInSync`` on, the directory holds exactly the wanted files:
  anything else there is deleted (so nothing stale outlives a restart).
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from dataplane.wire._pb import felixbackend_pb2 as pb

__all__ = ["FakeFelixStatusFiles", "status_file_content", "status_file_name"]


def status_file_name(wid: pb.WorkloadEndpointID) -> str:
    # Go's url.PathEscape keeps "$&+:=@" besides what quote() always keeps.
    fields = (wid.orchestrator_id, wid.workload_id, wid.endpoint_id)
    return " ".join(quote(f, safe="$&+:=@") for f in fields)


def status_file_content(ep: pb.WorkloadEndpoint) -> bytes:
    body: dict[str, object] = {}
    for key, value in (
        ("ifaceName", ep.name),
        ("mac", ep.mac),
        ("ipv4Nets", list(ep.ipv4_nets)),
        ("ipv6Nets", list(ep.ipv6_nets)),
        ("bgpPeerName", ep.local_bgp_peer.bgp_peer_name),
    ):
        if value:
            body[key] = value
    return json.dumps(body, separators=(",", ":")).encode()


class FakeFelixStatusFiles:
    """One Felix process's reporter over ``directory`` (which outlives it)."""

    def __init__(self, directory: Path, *, external: bool = True) -> None:
        self.directory = directory
        self.external = external
        directory.mkdir(parents=True, exist_ok=True)
        self._wanted: dict[str, bytes] = {}
        self._in_sync = False
        self.skipped = 0  # updates without the endpoint, which Felix cannot write

    def feed(self, envelope: pb.FromDataplane) -> None:
        kind = envelope.WhichOneof("payload")
        if kind == "workload_endpoint_status_update":
            update = envelope.workload_endpoint_status_update
            name = status_file_name(update.id)
            if not update.HasField("endpoint"):
                self.skipped += 1
            elif update.status.status == "up":
                self._wanted[name] = status_file_content(update.endpoint)
            elif update.status.status == "down":
                self._wanted.pop(name, None)
        elif kind == "workload_endpoint_status_remove":
            self._wanted.pop(status_file_name(envelope.workload_endpoint_status_remove.id), None)
        elif kind == "dataplane_in_sync" and not self.external:
            self._in_sync = True
        if self._in_sync:
            self._reconcile()

    def _reconcile(self) -> None:
        for path in self.directory.iterdir():
            if path.name not in self._wanted:
                path.unlink()
        for name, content in self._wanted.items():
            path = self.directory / name
            if not path.exists() or path.read_bytes() != content:
                path.write_bytes(content)

    def wanted(self) -> dict[str, bytes]:
        """What it would write, had it seen DataplaneInSync."""
        return dict(sorted(self._wanted.items()))

    def files(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(self.directory.iterdir())}
