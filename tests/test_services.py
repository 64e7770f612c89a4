"""Services manager and diff store: full state in, minimal changes out."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataplane.core.diffstore import DiffStore
from dataplane.errors import InputError
from dataplane.managers import ServicesManager
from dataplane.model.services import Backend, BackendState, Service, ServiceKey, sorted_keys
from dataplane.wire._pb import felixbackend_pb2 as pb


class Sink:
    def __init__(self) -> None:
        self.services: dict[ServiceKey, Service] = {}
        self.writes: list[ServiceKey] = []

    def set_service(self, service: Service) -> None:
        self.services[service.key] = service
        self.writes.append(service.key)

    def remove_service(self, key: ServiceKey) -> None:
        self.services.pop(key, None)
        self.writes.append(key)


def svc(name: str = "web", **kwargs: object) -> pb.ServiceUpdate:
    base: dict[str, object] = {
        "name": name,
        "namespace": "prod",
        "type": "NodePort",
        "cluster_ips": ["10.96.0.10", "fd00:96::10"],
        "ports": [pb.ServicePort(Protocol="TCP", Port=80, NodePort=30080, name="http")],
    }
    base.update(kwargs)
    return pb.ServiceUpdate(**base)  # type: ignore[arg-type]


def _ports_of(*ports: tuple[str, int]) -> pb.ServiceBackendsUpdate:
    """One backend per (protocol, port), each of one address."""
    return pb.ServiceBackendsUpdate(
        name="web",
        namespace="prod",
        backends=[
            pb.ServiceBackend(
                addresses=[f"10.65.0.{i + 1}"],
                ports=[pb.ServiceBackendPort(name="http", protocol=protocol, port=number)],
            )
            for i, (protocol, number) in enumerate(ports)
        ],
    )


def backends(
    name: str = "web", *addresses: str, local: bool = True, **kw: object
) -> pb.ServiceBackendsUpdate:
    return pb.ServiceBackendsUpdate(
        name=name,
        namespace="prod",
        backends=[
            pb.ServiceBackend(
                addresses=[a],
                ports=[pb.ServiceBackendPort(name="http", protocol="TCP", port=8080)],
                local=local,
                **kw,  # type: ignore[arg-type]
            )
            for a in addresses
        ],
    )


def test_full_state_per_service_and_only_changes_handed_over() -> None:
    sink = Sink()
    mgr = ServicesManager(sink)
    mgr.on_update(svc())
    mgr.on_update(svc("api"))
    mgr.on_update(backends("web", "10.65.0.20", "10.65.0.21"))
    mgr.complete_deferred_work()
    web = sink.services[ServiceKey("prod", "web")]
    assert [b.address for b in web.backends] == ["10.65.0.20", "10.65.0.21"]
    assert web.ports[0].node_port == 30080 and web.cluster_ips == ("10.96.0.10", "fd00:96::10")
    sink.writes.clear()
    # The same state again: nothing to do. One service changes: only it.
    mgr.on_update(svc())
    mgr.on_update(backends("api", "10.65.0.30"))
    mgr.complete_deferred_work()
    assert sink.writes == [ServiceKey("prod", "api")]
    mgr.on_update(pb.ServiceRemove(name="api", namespace="prod"))
    mgr.complete_deferred_work()
    assert ServiceKey("prod", "api") not in sink.services


def test_extension_fields() -> None:
    sink = Sink()
    mgr = ServicesManager(sink)
    mgr.on_update(
        svc(
            session_affinity="ClientIP",
            session_affinity_timeout_seconds=60,
            external_traffic_policy="Local",
            internal_traffic_policy="Local",
            load_balancer_source_ranges=["192.168.0.0/16"],
            health_check_node_port=32000,
            loadbalancer_ingress_ips=["172.16.0.1"],
        )
    )
    mgr.on_update(backends("web"))  # none: the service is known to have no backends
    mgr.complete_deferred_work()
    web = sink.services[ServiceKey("prod", "web")]
    assert web.session_affinity and web.affinity_timeout == 60
    assert web.external_local and web.internal_local
    assert web.source_ranges == ("192.168.0.0/16",) and web.load_balancer_ips == ("172.16.0.1",)
    assert web.health_check_node_port == 32000


def test_backend_health_takes_a_backend_out_of_selection() -> None:
    sink = Sink()
    mgr = ServicesManager(sink)
    mgr.on_update(svc())
    mgr.on_update(backends("web", "10.65.0.20", "10.65.0.21"))
    mgr.complete_deferred_work()
    mgr.set_backend_health("10.65.0.20", healthy=False)
    mgr.complete_deferred_work()
    web = sink.services[ServiceKey("prod", "web")]
    assert [b.address for b in web.usable(local_only=False)] == ["10.65.0.21"]
    mgr.set_backend_health("10.65.0.20", healthy=True)
    mgr.complete_deferred_work()
    assert len(sink.services[ServiceKey("prod", "web")].usable(local_only=False)) == 2


def test_terminating_backends_only_when_no_active_one() -> None:
    key = ServiceKey("prod", "web")
    active = Backend("10.0.0.1", ())
    terminating = Backend("10.0.0.2", (), state=BackendState.TERMINATING)
    assert Service(key, backends=(active, terminating)).usable(local_only=False) == (active,)
    assert Service(key, backends=(terminating,)).usable(local_only=False) == (terminating,)
    quarantined = Backend("10.0.0.3", (), state=BackendState.QUARANTINED)
    assert Service(key, backends=(quarantined,)).usable(local_only=False) == ()


@pytest.mark.parametrize(
    ("msg", "field", "value"),
    [
        (svc(ports=[pb.ServicePort(Protocol="TCP", Port=0)]), "ports[0].Port", 0),
        (svc(cluster_ips=["10.96.0.300"]), "cluster_ips[0]", "10.96.0.300"),
        (
            svc(ports=[pb.ServicePort(Protocol="TCP", Port=80, NodePort=80)]),
            "ports[0].NodePort",
            80,
        ),
        (svc(ports=[pb.ServicePort(Protocol="ICMP", Port=80)]), "ports[0].Protocol", "ICMP"),
        (svc(external_traffic_policy="Sometimes"), "external_traffic_policy", "Sometimes"),
        (svc(load_balancer_source_ranges=["nope"]), "load_balancer_source_ranges[0]", "nope"),
        (backends("ghost", "10.65.0.20"), "name", "prod/ghost"),
        (backends("web", "10.65.0.999"), "backends[0].addresses[0]", "10.65.0.999"),
        (backends("web", "10.65.0.1", "fd00::x"), "backends[1].addresses[0]", "fd00::x"),
        # Backends listing the same ports share them: the first with a bad one is named.
        (_ports_of(("TCP", 8080), ("TCP", 0)), "backends[1].ports[0].port", 0),
        (
            _ports_of(("TCP", 8080), ("TCP", 8080), ("ICMP", 1)),
            "backends[2].ports[0].protocol",
            "ICMP",
        ),
    ],
)
def test_bad_input_is_rejected_and_state_kept(
    msg: pb.ServiceUpdate, field: str, value: object
) -> None:
    sink = Sink()
    mgr = ServicesManager(sink)
    mgr.on_update(svc())
    mgr.on_update(backends("web", "10.65.0.20"))
    mgr.complete_deferred_work()
    before = dict(sink.services)
    with pytest.raises(InputError) as info:
        mgr.on_update(msg)
    assert (info.value.field, info.value.value) == (field, value)
    mgr.complete_deferred_work()
    assert sink.services == before


@given(
    st.lists(
        st.tuples(st.sampled_from("abcde"), st.one_of(st.none(), st.integers(0, 3)), st.booleans()),
        max_size=40,
    )
)
def test_diffstore_replays_to_the_desired_state(ops: list[tuple[str, int | None, bool]]) -> None:
    """Property: applying every commit's changes to a copy reproduces desired."""
    store: DiffStore[str, int] = DiffStore()
    mirror: dict[str, int] = {}
    desired: dict[str, int] = {}
    for key, value, commit in ops:
        if value is None:
            store.delete(key)
            desired.pop(key, None)
        else:
            store.set(key, value)
            desired[key] = value
        if commit:
            changes = store.commit()
            for k in changes.deletes:
                assert k in mirror
                del mirror[k]
            for k, v in changes.upserts.items():
                assert mirror.get(k) != v  # only real changes are reported
                mirror[k] = v
    changes = store.commit()
    for k in changes.deletes:
        del mirror[k]
    mirror.update(changes.upserts)
    assert mirror == desired


@given(st.lists(st.builds(ServiceKey, st.text(max_size=4), st.text(max_size=4)), max_size=40))
def test_sorted_keys_is_the_keys_own_order(keys: list[ServiceKey]) -> None:
    assert sorted_keys(keys) == sorted(keys)
