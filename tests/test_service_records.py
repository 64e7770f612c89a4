"""What ``show`` says about a service: its source, and each endpoint's choice or why not."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from dataplane.kube.endpoints import NodeInfo, Slice, SliceEndpoint, backends, not_ready
from dataplane.model.services import (
    Backend,
    BackendPort,
    BackendState,
    Service,
    ServiceKey,
    ServicePort,
)
from dataplane.ops.commands import render_tables
from dataplane.ops.objects import ObjectRecord, Snapshot
from dataplane.ops.records import records
from dataplane.sim.platform import SimState

KEY = ServiceKey("prod", "web")
HTTP = (BackendPort("http", "tcp", 8080),)
NODE = NodeInfo("node-a", "z1")


def _endpoint(address: str, node: str, **kw: Any) -> SliceEndpoint:
    fields: dict[str, Any] = {
        "ready": True,
        "serving": True,
        "terminating": False,
        "zone_hints": frozenset(),
        "node_hints": frozenset(),
    }
    return SliceEndpoint(address=address, node_name=node, **(fields | kw))


def _service_records(service: Service, source: str = "kubernetes") -> list[dict[str, Any]]:
    state = SimState()
    state.services[service.key] = service
    snap = Snapshot(
        state,
        {("service", str(KEY)): ObjectRecord("service", str(KEY), "done", 0.0)},
        {},
        0.0,
        services_source=source,
    )
    return records(snap)


def _by_endpoint(record: dict[str, Any]) -> dict[str, tuple[list[str], str | None]]:
    return {e["endpoint"]: (e["chosen"], e["why_not"]) for e in record["endpoints"]}


def test_each_endpoint_of_a_kubernetes_service_is_chosen_or_says_why_not() -> None:
    """From slices, through kube-proxy's choice, to what show prints."""
    z2 = frozenset({"z2"})
    slices = [
        Slice(
            KEY,
            "web-1",
            HTTP,
            (
                _endpoint("10.65.0.1", "node-a", zone_hints=frozenset({"z1"})),
                _endpoint("10.65.0.2", "node-b", zone_hints=z2),
                _endpoint("10.65.0.3", "node-b", ready=False, terminating=True, zone_hints=z2),
                _endpoint("10.65.0.4", "node-b", ready=False, serving=False),
            ),
        )
    ]
    service = Service(
        KEY,
        cluster_ips=("10.96.0.10",),
        ports=(ServicePort("http", "tcp", 80),),
        external_local=True,
        backends=backends(slices, NODE),
        not_ready=not_ready(slices),
    )
    [record] = _service_records(service)
    assert record["source"] == "kubernetes"
    assert record["frontends"] == ["10.96.0.10:80/tcp"]
    assert _by_endpoint(record) == {
        "10.65.0.1:8080/tcp": (["cluster", "local"], None),
        "10.65.0.2:8080/tcp": (
            [],
            "topology hints send this node's traffic to other endpoints; other node (Local policy)",
        ),
        "10.65.0.3:8080/tcp": (
            [],
            "terminating (ready endpoints serve); other node (Local policy)",
        ),
        "10.65.0.4": ([], "not ready"),
    }


def test_a_service_without_a_local_policy_never_says_other_node() -> None:
    service = Service(
        KEY,
        backends=(
            Backend("10.65.0.1", HTTP, node_name="node-b"),
            Backend("10.65.0.2", HTTP, state=BackendState.QUARANTINED, node_name="node-b"),
        ),
    )
    [record] = _service_records(service, source="messages")
    assert record["source"] == "messages"
    assert _by_endpoint(record) == {
        "10.65.0.1:8080/tcp": (["cluster"], None),
        "10.65.0.2:8080/tcp": ([], "quarantined (unhealthy)"),
    }


def test_terminating_endpoints_are_chosen_when_none_is_ready() -> None:
    service = Service(KEY, backends=(Backend("10.65.0.3", HTTP, state=BackendState.TERMINATING),))
    [record] = _service_records(service)
    assert _by_endpoint(record) == {"10.65.0.3:8080/tcp": (["cluster"], None)}


def test_not_ready_lists_only_addresses_no_slice_serves() -> None:
    one = Slice(KEY, "a", HTTP, (_endpoint("10.65.0.9", "n", ready=False, serving=False),))
    two = Slice(
        KEY,
        "b",
        HTTP,
        (_endpoint("10.65.0.9", "n"), _endpoint("fd00::1", "n", ready=False, serving=False)),
    )
    assert not_ready([one]) == ("10.65.0.9",)
    assert not_ready([one, two]) == ("fd00::1",)


def test_the_table_prints_one_line_per_endpoint() -> None:
    service = Service(
        KEY,
        external_local=True,
        backends=(
            Backend("10.65.0.1", HTTP, local=True, node_name="node-a"),
            Backend("10.65.0.2", HTTP, node_name="node-b"),
        ),
        not_ready=("10.65.0.4",),
    )
    console = Console(width=250, record=True)
    render_tables(_service_records(service), console)
    text = console.export_text()
    assert "10.65.0.1:8080/tcp (node-a): cluster, local" in text
    assert "10.65.0.2:8080/tcp (node-b): cluster; other node (Local policy)" in text
    assert "10.65.0.4: not chosen; not ready" in text
    assert "kubernetes" in text
