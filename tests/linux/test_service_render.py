"""Service renderer: golden chains, equal odds, and a shallow dispatch tree."""

from __future__ import annotations

import ipaddress
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.linux.iptables.chains import IptChain
from dataplane.linux.render.chain_names import MAX_CHAIN_NAME, ChainNames
from dataplane.linux.render.service import Frontend, ServiceRenderer
from dataplane.linux.rules.marks import Marks
from dataplane.model.services import (
    Backend,
    BackendPort,
    BackendState,
    Service,
    ServiceKey,
    ServicePort,
)
from tests.linux.test_render import GOLDEN

HTTP = (BackendPort("http", "tcp", 8080),)


def _renderer(version: int) -> ServiceRenderer:
    return ServiceRenderer(version, ChainNames(), Marks.from_mask(0xFFFF0000), f"cali{version}0all")


def _dump(chains: list[IptChain]) -> str:
    out = []
    for chain in chains:
        out.append(f":{chain.name}")
        out.extend(f"  {rule.text()}" for rule in chain.rules)
    return "\n".join(out) + "\n"


def _service(**kwargs: object) -> Service:
    base: dict[str, object] = {
        "key": ServiceKey("prod", "web"),
        "type": "LoadBalancer",
        "cluster_ips": ("10.96.0.10", "fd00:96::10"),
        "external_ips": ("192.0.2.10",),
        "load_balancer_ips": ("198.51.100.10",),
        "ports": (ServicePort("http", "tcp", 80, 30080),),
        "source_ranges": ("203.0.113.0/24",),
        "backends": (
            Backend("10.65.0.20", HTTP, local=True),
            Backend("10.65.0.21", HTTP, local=False),
            Backend("fd00:10:65::14", HTTP, local=True),
            Backend("10.65.0.22", HTTP, local=True, state=BackendState.TERMINATING),
        ),
    }
    base.update(kwargs)
    return Service(**base)  # type: ignore[arg-type]


def test_service_chains_golden() -> None:
    text = ""
    for name, svc in (
        ("cluster policy", _service()),
        (
            "local policy + affinity",
            _service(external_local=True, session_affinity=True, affinity_timeout=60),
        ),
        ("no backends", _service(backends=())),
    ):
        for v in (4, 6):
            rendered = _renderer(v).render(svc)
            text += f"# {name}, IPv{v}: {rendered.local_endpoints} local\n"
            text += _dump(rendered.chains)
            text += "".join(f"  frontend {f}\n" for f in rendered.frontends)
            text += _dump([_renderer(v).rejects(rendered.frontends)])
    path = GOLDEN / "services.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_random_choice_has_exactly_equal_odds() -> None:
    backends = tuple(Backend(f"10.65.0.{i}", HTTP) for i in range(1, 8))
    chains = (
        _renderer(4)
        .render(_service(backends=backends, external_ips=(), load_balancer_ips=()))
        .chains
    )
    svc = next(c for c in chains if c.name.startswith("cali-svc-"))
    remaining, odds = 1.0, []
    for rule in svc.rules:
        p = float(rule.match.split("--probability ")[1]) if "probability" in rule.match else 1.0
        odds.append(remaining * p)
        remaining *= 1 - p
    assert all(abs(o - 1 / 7) < 1e-9 for o in odds)


@settings(max_examples=20, deadline=None)
@given(st.integers(min_value=1, max_value=6000), st.integers(min_value=0, max_value=2**16))
def test_dispatch_tree_is_shallow(count: int, seed: int) -> None:
    base = int(ipaddress.ip_address("10.96.0.0")) + seed
    frontends = [
        Frontend(str(ipaddress.ip_address(base + 7 * i)), "tcp", 80, f"cali-svc-{i}")
        for i in range(count)
    ]
    chains = {c.name: c for c in _renderer(4).dispatch(frontends)}
    for chain in chains.values():
        assert len(chain.name) <= MAX_CHAIN_NAME
        assert len(chain.rules) <= 32
    for f in frontends[:: max(1, count // 50)]:
        chain, visited = chains["cali-svc-dispatch"], 0
        while True:
            rule = next(
                r
                for r in chain.rules
                if (r.match.startswith(f"-d {f.address} ") and "--dport" in r.match)
                or (
                    "--dport" not in r.match
                    and ipaddress.ip_address(f.address or "") in ipaddress.ip_network(r.match[3:])
                )
            )
            visited += chain.rules.index(rule) + 1
            target = rule.action.split()[-1]
            if target in chains:
                chain = chains[target]
                continue
            assert target == f.target
            break
        assert visited <= 100  # O(log n): 6,000 frontends in a few dozen rules
