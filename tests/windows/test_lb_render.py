"""The load-balancer renderer: kube-proxy winkernel's mapping, golden; invariants by property."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.model.services import (
    Backend,
    BackendPort,
    BackendState,
    Service,
    ServiceKey,
    ServicePort,
)
from dataplane.windows.hns.hcn import (
    DISTRIBUTION_SOURCE_IP,
    LB_DSR,
    LB_IPV6,
    PM_LOCAL_ROUTED_VIP,
    PM_VIP_EXTERNAL_IP,
    HnsVersion,
)
from dataplane.windows.services.lb_render import LbOptions, load_balancer_json, render_service
from dataplane.windows.services.remote_endpoints import RemoteEndpoint
from dataplane.windows.sim.simhost import NEWEST, SimHost

GOLDEN = Path(__file__).parent.parent / "golden" / "windows"
HTTP = (BackendPort("http", "tcp", 8080),)
OPTIONS = LbOptions(source_vips=("10.65.0.2", "fd00:10:65::2"))


def service(**kwargs: object) -> Service:
    base: dict[str, object] = {
        "key": ServiceKey("prod", "web"),
        "type": "LoadBalancer",
        "cluster_ips": ("10.96.0.10", "fd00:96::10"),
        "external_ips": ("192.0.2.10",),
        "load_balancer_ips": ("198.51.100.10",),
        "ports": (ServicePort("http", "tcp", 80, 30080),),
        "backends": (
            Backend("10.65.0.20", HTTP, local=True),
            Backend("10.65.3.21", HTTP, local=False, node_name="node-b"),
            Backend("fd00:10:65::14", HTTP, local=True),
            Backend("10.65.0.22", HTTP, local=True, state=BackendState.TERMINATING),
        ),
    }
    base.update(kwargs)
    return Service(**base)  # type: ignore[arg-type]


def _text(name: str, svc: Service, options: LbOptions = OPTIONS) -> str:
    rendered = render_service(svc, options)
    out = [f"# {name}"]
    for lb in rendered.balancers:
        # Backend addresses stand in for the HNS endpoint ids the programmer resolves.
        value = load_balancer_json(lb, f"<{lb.key}>", [b.address for b in lb.backends])
        out.append(json.dumps(value, sort_keys=True))
    out.extend(f"  note: {n}" for n in rendered.notes)
    return "\n".join(out) + "\n"


def test_load_balancers_golden() -> None:
    mixed = (
        Backend("10.65.0.20", (BackendPort("http", "tcp", 8080),)),
        Backend("10.65.0.21", (BackendPort("http", "tcp", 8080),)),
        Backend("10.65.0.23", (BackendPort("http", "tcp", 9000),)),
        Backend("10.65.0.24", (BackendPort("metrics", "tcp", 9100),)),
    )
    text = "".join(
        (
            _text("cluster policy: every frontend, both families", service()),
            _text(
                "external Local + affinity with a timeout, DSR for cluster IPs",
                service(external_local=True, session_affinity=True, affinity_timeout=60),
                LbOptions(source_vips=OPTIONS.source_vips, dsr=True),
            ),
            _text(
                "internal Local: cluster IPs to local backends only", service(internal_local=True)
            ),
            _text(
                "named port on different numbers: the most shared wins",
                service(
                    backends=mixed,
                    cluster_ips=("10.96.0.11",),
                    external_ips=(),
                    load_balancer_ips=(),
                    ports=(ServicePort("http", "tcp", 80),),
                ),
            ),
            _text(
                "only terminating backends left",
                service(
                    backends=(Backend("10.65.0.22", HTTP, state=BackendState.TERMINATING),),
                    cluster_ips=("10.96.0.12",),
                ),
            ),
            _text(
                "no usable backend: no load balancer",
                service(backends=(Backend("10.65.0.22", HTTP, state=BackendState.QUARANTINED),)),
            ),
            _text(
                "HNS 9.1: no DSR, no affinity, no IPv6; source ranges and health check reported",
                service(
                    external_local=True,
                    session_affinity=True,
                    source_ranges=("203.0.113.0/24",),
                    health_check_node_port=31000,
                ),
                LbOptions(
                    source_vips=OPTIONS.source_vips,
                    dsr_supported=False,
                    affinity_supported=False,
                    families=(4,),
                ),
            ),
            _text(
                "Overlay network without a source VIP for IPv6",
                service(
                    ports=(ServicePort("dns", "udp", 53),),
                    backends=(
                        Backend("10.65.0.20", (BackendPort("dns", "udp", 5353),)),
                        Backend("fd00:10:65::14", (BackendPort("dns", "udp", 5353),)),
                    ),
                ),
                LbOptions(source_vips=("10.65.0.2",), source_vip_required=True),
            ),
            _text("ExternalName: nothing", service(type="ExternalName")),
        )
    )
    path = GOLDEN / "load_balancers.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_winkernel_flags_per_frontend() -> None:
    rendered = render_service(service(external_local=True), LbOptions(dsr=True))
    by_vip = {(lb.key.vip, lb.key.family): lb for lb in rendered.balancers}
    cluster = by_vip[("10.96.0.10", 4)]
    assert (cluster.flags, cluster.port_flags) == (LB_DSR, 0)
    assert by_vip[("fd00:96::10", 6)].flags == LB_DSR | LB_IPV6
    node_port = by_vip[("", 4)]
    assert node_port.key.port == 30080
    assert node_port.port_flags == PM_LOCAL_ROUTED_VIP | PM_VIP_EXTERNAL_IP
    assert node_port.flags == LB_DSR  # Local: only DSR keeps the client's address
    for vip in ("192.0.2.10", "198.51.100.10"):
        assert by_vip[(vip, 4)].port_flags == PM_VIP_EXTERNAL_IP
        assert {b.address for b in by_vip[(vip, 4)].backends} == {"10.65.0.20"}  # local only
    assert {b.address for b in cluster.backends} == {"10.65.0.20", "10.65.3.21"}


def test_affinity_is_source_ip_distribution() -> None:
    (lb, *_) = render_service(service(session_affinity=True), OPTIONS).balancers
    assert lb.distribution == DISTRIBUTION_SOURCE_IP
    mapping = load_balancer_json(lb, "id", ["a"])["PortMappings"][0]
    assert mapping["DistributionType"] == DISTRIBUTION_SOURCE_IP


_ADDRESSES = st.sampled_from(
    ["10.65.0.20", "10.65.0.21", "10.65.1.5", "fd00:10:65::14", "fd00:10:65::15"]
)
_BACKENDS = st.lists(
    st.builds(
        Backend,
        _ADDRESSES,
        st.lists(
            st.builds(
                BackendPort,
                st.sampled_from(["http", "dns"]),
                st.sampled_from(["tcp", "udp"]),
                st.sampled_from([53, 8080, 9000]),
            ),
            max_size=3,
        ).map(tuple),
        local=st.booleans(),
        state=st.sampled_from(list(BackendState)),
    ),
    max_size=6,
    unique_by=lambda b: b.address,
).map(tuple)


@settings(max_examples=200, deadline=None)
@given(
    backends=_BACKENDS,
    internal_local=st.booleans(),
    external_local=st.booleans(),
    affinity=st.booleans(),
    port=st.sampled_from([ServicePort("http", "tcp", 80, 30080), ServicePort("dns", "udp", 53)]),
)
def test_every_load_balancer_is_one_hns_takes_and_no_backend_is_lost_silently(
    backends: tuple[Backend, ...],
    internal_local: bool,
    external_local: bool,
    affinity: bool,
    port: ServicePort,
) -> None:
    svc = service(
        backends=backends,
        internal_local=internal_local,
        external_local=external_local,
        session_affinity=affinity,
        ports=(port,),
    )
    rendered = render_service(svc, OPTIONS)
    keys = [lb.key for lb in rendered.balancers]
    assert len(keys) == len(set(keys))
    notes = " ".join(str(n) for n in rendered.notes)
    for lb in rendered.balancers:
        assert lb.backends  # HNS refuses an empty load balancer
        local_only = external_local if lb.port_flags & PM_VIP_EXTERNAL_IP else internal_local
        usable = {b.address: b for b in svc.usable(local_only=local_only)}
        numbers = Counter(
            n
            for b in usable.values()
            if (":" in b.address) == (lb.key.family == 6) and (n := b.port_for(port)) is not None
        )
        assert numbers[lb.internal_port] == max(numbers.values())
        for chosen in lb.backends:
            assert usable[chosen.address].port_for(port) == lb.internal_port
        left_out = [n for n, c in numbers.items() if n != lb.internal_port]
        assert not left_out or "left out" in notes
        assert lb.source_vip == OPTIONS.source_vip(lb.key.family)
        assert bool(lb.flags & LB_IPV6) == (lb.key.family == 6)
    for vip in svc.cluster_ips:
        family = 6 if ":" in vip else 4
        if not any(lb.key.vip == vip for lb in rendered.balancers):
            assert not any(
                (":" in b.address) == (family == 6) and b.port_for(port) is not None
                for b in svc.usable(local_only=internal_local)
            )
            assert "no usable backend" in notes


# --- HNS's own rules take whatever is rendered --------------------------------------

_V4 = ["10.96.0.10", "10.96.0.11", "192.0.2.10", "198.51.100.10"]
_V6 = ["fd00:96::10", "fd00:96::11", "2001:db8::10"]
_LOCAL = ["10.65.0.20", "10.65.0.21", "fd00:10:65::14"]
_REMOTE = ["10.65.2.7", "10.65.2.8", "fd00:10:65::2:7"]
_PORTS = st.lists(
    st.builds(
        ServicePort,
        st.sampled_from(["http", "dns", ""]),
        st.sampled_from(["tcp", "udp", "sctp"]),
        st.integers(1, 65535),
        st.sampled_from([0, 30080, 32767]),
    ),
    min_size=1,
    max_size=3,
    unique_by=lambda p: (p.protocol, p.port),
).filter(
    lambda ports: (
        len({p.node_port for p in ports if p.node_port}) == sum(1 for p in ports if p.node_port)
    )
)


@st.composite
def _services(draw: st.DrawFn) -> Service:
    vips = draw(st.lists(st.sampled_from(_V4 + _V6), unique=True, min_size=1, max_size=5))
    cut1, cut2 = sorted(draw(st.lists(st.integers(0, len(vips)), min_size=2, max_size=2)))
    ports = draw(_PORTS)
    # Each backend serves some of the ports (by name and protocol), on numbers of its own.
    serves = st.lists(st.sampled_from(ports), unique=True, min_size=1).map(
        lambda chosen: tuple(
            BackendPort(p.name, p.protocol, draw(st.integers(1, 65535))) for p in chosen
        )
    )
    backends = draw(
        st.lists(
            st.builds(
                Backend,
                st.sampled_from(_LOCAL + _REMOTE),
                serves,
                state=st.sampled_from(list(BackendState)),
            ),
            unique_by=lambda b: b.address,
            min_size=2,
            max_size=6,
        )
    )
    return service(
        cluster_ips=tuple(vips[:cut1]),
        external_ips=tuple(vips[cut1:cut2]),
        load_balancer_ips=tuple(vips[cut2:]),
        ports=tuple(ports),
        backends=tuple(b._replace(local=b.address in _LOCAL) for b in backends),
        session_affinity=draw(st.booleans()),
        external_local=draw(st.booleans()),
        internal_local=draw(st.booleans()),
    )


@settings(max_examples=150, deadline=None)
@given(
    _services(),
    st.sampled_from([HnsVersion(9, 1), HnsVersion(10, 2), HnsVersion(12, 0), NEWEST]),
    st.booleans(),
)
def test_the_simulated_hns_takes_every_rendered_load_balancer_and_remote_endpoint(
    svc: Service, version: HnsVersion, dsr: bool
) -> None:
    """HNS's rules (ports, protocols, flags per version, VIP families, one frontend per
    load balancer, existing endpoints, remote endpoints' MAC and provider) hold for any
    service: rendering never produces what the host would refuse."""
    host = SimHost(version)
    network = host.add_network({"Name": "Calico", "Type": "Overlay"})["ID"]
    local_ids = {
        a: host.add_local_endpoint(network, {"Name": a, "IpConfigurations": [{"IpAddress": a}]})[
            "ID"
        ]
        for a in _LOCAL
    }
    options = LbOptions(
        source_vips=OPTIONS.source_vips,
        dsr=dsr,
        dsr_supported=version.supports("DSR"),
        affinity_supported=version.supports("SessionAffinity"),
        families=(4, 6) if version.supports("IPv6DualStack") else (4,),
        source_vip_required=True,
    )
    remote_ids: dict[str, str] = {}
    for lb in render_service(svc, options).balancers:
        ids = []
        for backend in lb.backends:
            if backend.local:
                ids.append(local_ids[backend.address])
                continue
            if backend.address not in remote_ids:
                remote = RemoteEndpoint(network, backend.address, "192.168.1.12")
                remote_ids[backend.address] = host.create_endpoint(network, remote.json())["ID"]
            ids.append(remote_ids[backend.address])
        host.create_load_balancer(load_balancer_json(lb, "", ids))  # refused: HcnError
