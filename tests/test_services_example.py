"""examples/services-node.log: services and VXLAN neighbours to try show and explain on."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from dataplane.wire.msglog import build_log
from examples.services_node import API_VIP, LOG_PATH, REMOTE_API, services_messages
from tests.conftest import REPO

DRIVER = [sys.executable, "-m", "dataplane"]


def _run(*args: str) -> str:
    done = subprocess.run(
        [*DRIVER, *args], capture_output=True, text=True, cwd=REPO, check=True, timeout=60
    )
    return done.stdout


def test_the_committed_log_is_current() -> None:
    assert LOG_PATH.read_bytes() == build_log(services_messages()), (
        "examples/services-node.log is stale: run `python examples/services_node.py`"
    )


def test_show_gives_each_service_s_endpoints_and_the_vxlan_neighbours() -> None:
    document = json.loads(_run("show", "--log", str(LOG_PATH), "--json"))
    assert document["in_sync"] is True
    objects: dict[tuple[str, str], dict[str, Any]] = {
        (o["kind"], o["id"]): o for o in document["objects"]
    }
    assert {o["status"] for o in objects.values()} == {"done"}
    public = objects[("service", "backend/api-public")]
    assert public["type"] == "NodePort" and "*:30080/tcp" in public["frontends"]
    chosen = {e["endpoint"]: (e["chosen"], e["why_not"]) for e in public["endpoints"]}
    assert chosen[f"{REMOTE_API}:8080/tcp"] == (["cluster"], "other node (Local policy)")
    db = objects[("service", "backend/db")]
    assert [(e["state"], e["chosen"]) for e in db["endpoints"]] == [("terminating", ["cluster"])]
    assert {ident for kind, ident in objects if kind == "vtep"} == {"node-1", "node-2", "node-3"}
    assert objects[("route", "10.65.2.0/26")]["types"] == "remote_workload"


# From web-1 on this node to backend/api's cluster IP.
QUERY = ["--from", "10.65.1.10", "--to", API_VIP, "--proto", "tcp", "--port", "80"]


def test_explain_follows_a_vip_to_each_backend() -> None:
    body = json.loads(_run("explain", "--log", str(LOG_PATH), *QUERY, "--json"))
    assert body["verdict"] == "allow" and body["in_sync"] is True
    text = _run("explain", "--log", str(LOG_PATH), *QUERY)
    assert "is service backend/api port http: 3 backend(s)" in text
    assert f"backend {REMOTE_API}:8080: DNAT to {REMOTE_API}, outside this node" in text


def test_show_into_a_pipe_prints_a_block_per_record_and_a_line_per_field() -> None:
    """Off a terminal no column is folded: grep finds a whole endpoint's line."""
    shown = _run("show", "--log", str(LOG_PATH), "--kind", "service")
    lines = shown.splitlines()
    assert lines[0] == "service (3)"
    block = lines[lines.index("service backend/api-public") :]
    block = block[: block.index("")]
    assert "  type: NodePort" in block and "    *:30080/tcp" in block
    assert f"    {REMOTE_API}:8080/tcp (node-2): cluster; other node (Local policy)" in block
    assert lines[-1] == "3 objects: 0 error, 0 pending"
