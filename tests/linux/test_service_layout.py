"""The nftables services table without a kernel: what each service adds, and the deltas.

The layout's elements are compared with elements built here from the
model (kube-proxy's semantics written out by hand), and the programmer
runs against a fake that keeps sets and maps as the kernel does: a
transaction applies all of its changes or none, deleting a missing
element or re-adding a key with other data is refused. Whatever the
order of service changes, what the fake holds after an apply is exactly
what the services now wanted add up to.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from ipaddress import ip_network

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.errors import ProgrammingError
from dataplane.linux.kernel.cmd import CommandResult
from dataplane.linux.nftables.elements import (
    ElementChange,
    addr,
    concat,
    data_of,
    encoded,
    integer,
    interval,
    interval_end,
    key_of,
    port,
    proto,
    ranged,
)
from dataplane.linux.nftables.reader import ReadElement, ReadRule
from dataplane.linux.nftables.service_layout import (
    EXACT,
    Affinity,
    Contribution,
    ServiceLayout,
    slot_count,
    slot_counts,
)
from dataplane.linux.nftables.service_table import ServiceTable
from dataplane.model.services import (
    Backend,
    BackendPort,
    BackendState,
    Service,
    ServiceKey,
    ServicePort,
)

LAYOUT = ServiceLayout(4, "cali-svc", 0x4000000)
TO = (BackendPort("http", "tcp", 8080),)
TCP = proto(6)


def key(vip: str, number: int = 80) -> bytes:
    return concat((addr(vip), TCP, port(number)))


def np_key(number: int) -> bytes:
    return concat((TCP, port(number)))


def slots(k: bytes, *addresses: str, to: int = 8080) -> tuple[set[bytes], set[bytes]]:
    """The address and port elements of ``k`` with one slot per address."""
    a = {encoded(k + integer(i).value, addr(x).value) for i, x in enumerate(addresses)}
    p = {encoded(k + integer(i).value, port(to).value) for i in range(len(addresses))}
    return a, p


def svc(*backends: Backend, **fields: object) -> Service:
    base: dict[str, object] = {
        "cluster_ips": ("10.96.0.10",),
        "ports": (ServicePort("http", "tcp", 80),),
    }
    base.update(fields)
    return Service(ServiceKey("prod", "web"), backends=backends, **base)  # type: ignore[arg-type]


def b(address: str, *, local: bool = False, state: BackendState = BackendState.ACTIVE) -> Backend:
    return Backend(address, TO, local=local, state=state)


def flat(contribution: Contribution) -> dict[str, set[bytes]]:
    """Every element the contribution adds, by set."""
    out: dict[str, set[bytes]] = {}
    parts = [f.elements for f in contribution.frontends.values()] + [contribution.shared]
    for part in parts:
        for name, elements in part.items():
            out.setdefault(name, set()).update(elements)
    return out


def contribution(service: Service, layout: ServiceLayout = LAYOUT) -> dict[str, set[bytes]]:
    return flat(layout.contribution(service))


def remote(*addresses: str) -> set[bytes]:
    return {encoded(addr(a).value) for a in addresses}


def test_a_cluster_ip_is_a_frontend_its_slots_and_its_backends() -> None:
    k = key("10.96.0.10")
    a, p = slots(k, "10.65.1.1", "10.65.1.2")
    got = contribution(svc(b("10.65.1.1"), b("10.65.1.2", local=True)))
    assert got == {
        "fe": {encoded(k)},
        "fe_2": {encoded(k)},
        "addr": a,
        "port": p,
        "remote": remote("10.65.1.1"),
        "hairpin": {encoded(addr("10.65.1.2").value * 2)},
    }
    # Each set's elements sorted: the table compares a frontend's old and
    # new tuples to find what changed, so equal sets must be equal tuples.
    made = LAYOUT.contribution(svc(*(b(f"10.65.1.{i}") for i in (9, 3, 7, 1))))
    parts = [f.elements for f in made.frontends.values()] + [made.shared]
    assert all(list(e) == sorted(e) for part in parts for e in part.values())


def test_nowhere_to_go_is_refused_or_dropped_as_kube_proxy_does() -> None:
    k = key("10.96.0.10")
    assert contribution(svc()) == {"refused": {encoded(k)}}
    # Terminating backends serve only when no active one is left; quarantined never.
    only_quarantined = svc(b("10.65.1.1", state=BackendState.QUARANTINED))
    assert contribution(only_quarantined)["refused"] == {encoded(k)}
    a, _ = slots(k, "10.65.1.2")
    terminating = svc(b("10.65.1.2", state=BackendState.TERMINATING))
    assert contribution(terminating)["addr"] == a
    # internalTrafficPolicy Local with no local backend: dropped, not refused.
    internal = contribution(svc(b("10.65.1.1"), internal_local=True))
    assert internal == {"dropped": {encoded(k)}, "remote": remote("10.65.1.1")}


def test_external_traffic_policies_on_node_ports_and_external_ips() -> None:
    ports = (ServicePort("http", "tcp", 80, node_port=30080),)
    cluster = contribution(
        svc(b("10.65.1.1"), ports=ports, external_ips=("192.0.2.7",), type="NodePort")
    )
    n, e = encoded(np_key(30080)), encoded(key("192.0.2.7"))
    assert cluster["np_fe"] == {n} and cluster["np_fe_1"] == {n} and cluster["np_masq"] == {n}
    assert cluster["masq"] == {e} and e in cluster["fe"]
    assert "np_ext_local" not in cluster and "masq_local" not in cluster

    local = contribution(
        svc(b("10.65.1.1"), b("10.65.1.2", local=True), ports=ports, external_local=True)
    )
    a, _ = slots(np_key(30080), "10.65.1.2")
    assert local["np_ext_local"] == {n} and local["np_masq_local"] == {n}
    assert local["np_lfe_1"] == {n} and local["np_local_addr"] == a
    assert local["np_fe_2"] == {n} and "np_masq" not in local

    none_here = contribution(svc(b("10.65.1.1"), ports=ports, external_local=True))
    assert none_here["np_dropped_outside"] == {n} and "np_ext_local" not in none_here
    assert none_here["np_fe_1"] == {n}  # pods and the node still reach it


def test_each_family_takes_its_own_addresses_and_external_names_nothing() -> None:
    v6 = ServiceLayout(6, "cali-svc", 0x4000000)
    dual = svc(b("10.65.1.1"), b("fd00:65::1"), cluster_ips=("10.96.0.10", "fd00:96::10"))
    assert contribution(dual)["addr"] == slots(key("10.96.0.10"), "10.65.1.1")[0]
    assert contribution(dual, v6)["addr"] == slots(key("fd00:96::10"), "fd00:65::1")[0]
    assert contribution(svc(b("10.65.1.1"), type="ExternalName")) == {}


def test_every_slot_is_its_number_past_the_slots_kept_packed() -> None:
    # 200 backends take 8,192 slots: the first 4,096 numbers come packed in
    # advance, the rest are packed as needed; the elements are the same.
    k = key("10.96.0.10")
    addresses = [f"10.65.{i // 250}.{i % 250 + 1}" for i in range(200)]
    count = slot_count(len(addresses))
    assert count == 8192
    got = contribution(svc(*(b(a) for a in addresses)))
    want = {
        encoded(k + integer(i).value, addr(addresses[i % len(addresses)]).value)
        for i in range(count)
    }
    assert got["addr"] == want


@given(st.integers(min_value=1, max_value=4000))
def test_slots_share_backends_within_one_slot(backends: int) -> None:
    count = slot_count(backends)
    assert count in slot_counts()
    shares = [len(range(i, count, backends)) for i in range(backends)]
    if backends <= EXACT:
        assert shares == [1] * backends  # exactly equal odds
    else:
        assert max(shares) - min(shares) <= 1
        if backends * EXACT <= max(slot_counts()):
            assert min(shares) >= EXACT  # each share within 1/EXACT of equal


# --- the programmer against a kernel-like fake -------------------------------------------


class FakeSets:
    """Sets and maps as nf_tables keeps them: keyed, all or nothing per transaction."""

    def __init__(self, nft: Nft | None = None) -> None:
        self.sets: dict[str, dict[bytes, bytes]] = {}
        self.transactions = 0
        self.refuse_next = False
        self.nft = nft  # whose scripts made the rules
        # The kernel commits one transaction at a time (its commit mutex),
        # whichever threads send them.
        self._commit = threading.Lock()

    def __call__(self, changes: Iterable[ElementChange]) -> None:
        with self._commit:
            self._transaction(changes)

    def _transaction(self, changes: Iterable[ElementChange]) -> None:
        if self.refuse_next:
            self.refuse_next = False
            raise OSError(errno.ENOBUFS, "refused once")
        staged = {name: dict(held) for name, held in self.sets.items()}
        for change in changes:
            held = staged.setdefault(change.set, {})
            if change.op == "flush":
                held.clear()
            for element in change.elements:
                assert isinstance(element, bytes)
                k = key_of(element)
                if change.op == "add":
                    if held.get(k, element) != element:
                        raise OSError(errno.EBUSY, "key holds other data")
                    held[k] = element
                elif change.op == "delete":
                    if k not in held:
                        raise OSError(errno.ENOENT, "no such element")
                    del held[k]
        self.sets = staged
        self.transactions += 1

    def contents(self) -> dict[str, set[bytes]]:
        return {name: set(held.values()) for name, held in self.sets.items() if held}

    def set_names(self, family: int, table: str) -> list[str]:
        """The sets elements were ever written to (one table: family and name aside)."""
        return sorted(self.sets)

    def elements(self, family: int, table: str, set_name: str) -> list[ReadElement]:
        """A set's or map's elements, as a netlink dump answers."""
        out = []
        for element in self.sets.get(set_name, {}).values():
            key = key_of(element)
            if element == interval_end(key):
                out.append(ReadElement(key, interval_end=True))
            elif element == ranged(key, data_of(element)):  # (data_of finds its end)
                out.append(ReadElement(key, key_end=data_of(element)))
            else:
                out.append(ReadElement(key, data_of(element)))
        return out

    def rules(self, family: int, table: str) -> list[ReadRule]:
        """The rules the scripts run so far left (``flush chain`` empties
        one, ``add rule`` appends), as a rules dump answers them."""
        chains: dict[str, list[str]] = {}
        for script in self.nft.scripts if self.nft else ():
            for line in script.splitlines():
                words = line.split(maxsplit=5)
                if words[:2] == ["flush", "chain"]:
                    chains[words[4]] = []
                elif words[:2] == ["add", "rule"]:
                    comment = line.rsplit('comment "', 1)[1].rstrip('"')
                    chains.setdefault(words[4], []).append(comment)
                elif line.startswith("add element ") and " pools " in line:
                    # The IP pools, as nft writes prefixes into an interval set.
                    prefixes = line.split("{", 1)[1].rstrip("} ").split(",")
                    nets = [ip_network(p.strip()) for p in prefixes]
                    held = self.sets.setdefault("pools", {})
                    for net in nets:
                        after = int(net.broadcast_address) + 1
                        end = (
                            after.to_bytes(net.max_prefixlen // 8)
                            if after >> net.max_prefixlen == 0
                            else None
                        )
                        for element in interval(net.network_address.packed, end):
                            held[element] = element
        return [ReadRule(chain, c) for chain, comments in chains.items() for c in comments]


class Nft:
    """Accepts every ``nft -f``, counting them."""

    def __init__(self) -> None:
        self.scripts: list[str] = []

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, check: bool = True
    ) -> CommandResult:
        self.scripts.append((stdin or b"").decode())
        return CommandResult(0, b"", b"")


def wanted(services: dict[str, Service], layout: ServiceLayout = LAYOUT) -> dict[str, set[bytes]]:
    """What the kernel must hold: shared elements of every service, each
    frontend's of the lowest-named service claiming it."""
    out: dict[str, set[bytes]] = {}
    owners: dict[bytes, Service] = {}
    for service in sorted(services.values(), key=lambda s: s.key, reverse=True):
        made = layout.contribution(service)
        owners.update(dict.fromkeys(made.frontends, service))
        for name, elements in made.shared.items():
            out.setdefault(name, set()).update(elements)
    for ident, service in owners.items():
        for name, elements in layout.contribution(service).frontends[ident].elements.items():
            out.setdefault(name, set()).update(elements)
    return out


# Dual-stack services: each family's table takes its own addresses.
ADDRESSES = [f"10.65.{i // 4}.{i % 4 + 1}" for i in range(8)]
ADDRESSES += [f"fd00:65::{i + 1:x}" for i in range(6)]
services_drawn = st.builds(
    lambda name, members, vips, balancers, ranges, local_policy, internal, node_port, sticky: (
        Service(
            ServiceKey("prod", name),
            session_affinity=sticky is not None,
            affinity_timeout=sticky or 10800,
            cluster_ips=tuple(vips),
            load_balancer_ips=balancers,
            source_ranges=ranges,
            ports=(ServicePort("http", "tcp", 80, node_port=node_port),),
            external_local=local_policy,
            internal_local=internal,
            backends=tuple(b(a, local=local, state=state) for a, local, state in members),
        )
    ),
    st.sampled_from(["a", "b", "c"]),
    st.lists(
        st.tuples(
            st.sampled_from(ADDRESSES),
            st.booleans(),
            st.sampled_from([BackendState.ACTIVE, BackendState.ACTIVE, BackendState.TERMINATING]),
        ),
        max_size=5,
        unique_by=lambda m: m[0],
    ),
    # Few frontends, shared between services: claims conflict.
    st.lists(st.sampled_from(["10.96.0.1", "10.96.0.2", "fd00:96::1"]), max_size=2, unique=True),
    st.sampled_from([(), ("198.51.100.1",), ("198.51.100.1", "2001:db8::1")]),
    st.sampled_from([(), ("10.0.0.0/8", "10.1.0.0/16"), ("192.168.0.0/16", "fd00::/8")]),
    st.booleans(),
    st.booleans(),
    st.sampled_from([0, 30080, 30081]),
    st.sampled_from([None, None, 10800, 60]),  # ClientIP affinity's timeout
)
steps = st.lists(
    st.one_of(
        services_drawn, st.sampled_from(["a", "b", "c"]), st.just("apply"), st.just("refuse")
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from([LAYOUT, ServiceLayout(6, "cali-svc", 0x4000000)]), steps, st.integers(1, 40)
)
def test_after_any_changes_the_kernel_holds_what_the_services_add_up_to(
    layout: ServiceLayout, script: list[Service | str], piece: int
) -> None:
    """Shared elements (a backend in two services, two services on one
    frontend) stay while anyone wants them; a refused transaction is
    repaired whole by the next apply. The first write into no table lands
    in pieces of ``piece`` elements."""
    kernel, nft = FakeSets(), Nft()
    table = ServiceTable(layout, nft, kernel, kernel)
    table.piece = piece
    services: dict[str, Service] = {}

    async def apply() -> None:
        try:
            await table.apply()
        except ProgrammingError:
            await table.apply()

    timeouts: set[int] = set()
    structures = 0
    new_timeout = False
    for step in [*script, "apply"]:
        if isinstance(step, Service):
            services[step.key.name] = step
            table.set_service(step)
            for f in layout.contribution(step).frontends.values():
                if f.affinity and f.affinity.timeout not in timeouts:
                    timeouts.add(f.affinity.timeout)
                    new_timeout = True
        elif step == "refuse":
            kernel.refuse_next = True
        elif step == "apply":
            trio.run(apply)
            structures += not structures or new_timeout
            new_timeout = False
            assert kernel.contents() == {n: e for n, e in wanted(services, layout).items() if e}
        else:
            services.pop(step, None)
            table.remove_service(ServiceKey("prod", step))
    # The table's structure, once, and again for each affinity timeout not in use before.
    assert len(nft.scripts) == structures


def test_changes_after_the_first_load_are_deltas_and_pools_rewrite_the_structure() -> None:
    kernel, nft = FakeSets(), Nft()
    table = ServiceTable(LAYOUT, nft, kernel, kernel)
    table.set_pools(["10.65.0.0/16"])
    table.set_service(svc(b("10.65.1.1"), b("10.65.1.2")))
    trio.run(table.apply)
    table.set_service(svc(b("10.65.1.1"), b("10.65.1.3")))
    sent: list[list[tuple[str, str, int]]] = []

    def record(changes: Iterable[ElementChange]) -> None:
        changes = list(changes)  # (read twice)
        sent.append(sorted((c.op, c.set, len(c.elements)) for c in changes))
        kernel(changes)

    table._writer = record
    trio.run(table.apply)
    # First the new slots, add-only, in the second bank: in force at once.
    assert sent[0] == [
        ("add", "addr", 2),
        ("add", "fe1", 1),
        ("add", "fe1_2", 1),
        ("add", "port", 2),
    ]
    # Then the first bank rewritten and the second emptied.
    assert sent[1] == [
        ("add", "addr", 1),
        ("add", "remote", 1),
        ("delete", "addr", 1),
        ("delete", "addr", 2),
        ("delete", "fe1", 1),
        ("delete", "fe1_2", 1),
        ("delete", "port", 2),
        ("delete", "remote", 1),
    ]
    assert len(sent) == 2
    # The same service again (a new object): its elements compare equal
    # (sorted tuples), so no slot looks changed and nothing is written.
    table.set_service(svc(b("10.65.1.1"), b("10.65.1.3")))
    assert not trio.run(table.apply)
    assert len(sent) == 2
    assert len(nft.scripts) == 1 and "10.65.0.0/16" in nft.scripts[0]
    table.set_pools(["10.65.0.0/16"])
    trio.run(table.apply)
    assert len(nft.scripts) == 1  # the same pools: nothing to write
    table.set_pools(["10.66.0.0/16"])
    trio.run(table.apply)
    assert len(nft.scripts) == 2 and "10.66.0.0/16" in nft.scripts[1]
    with pytest.raises(ValueError, match="IPv4 pools only"):
        table.set_pools(["fd00::/64"])
    with pytest.raises(ValueError):
        table.set_pools(["10.65.0.0/16; flush ruleset"])


def test_a_frontend_two_services_claim_is_one_services_and_the_other_is_held_back() -> None:
    kernel, nft = FakeSets(), Nft()
    table = ServiceTable(LAYOUT, nft, kernel, kernel)

    def claiming(name: str, backend: str) -> Service:
        return Service(
            ServiceKey("prod", name),
            external_ips=("192.0.2.7",),
            ports=(ServicePort("http", "tcp", 80),),
            backends=(b(backend),),
        )

    first, second = claiming("a", "10.65.1.1"), claiming("b", "10.65.1.2")
    table.set_service(second)
    table.set_service(first)
    trio.run(table.apply)
    k = key("192.0.2.7")
    assert kernel.contents()["addr"] == slots(k, "10.65.1.1")[0]
    assert table.held_back() == {"service prod/b": "192.0.2.7 tcp/80 is service prod/a's"}
    assert table.take_refusals() == list(table.held_back().items())
    assert table.take_refusals() == []  # said once
    table.remove_service(first.key)
    trio.run(table.apply)
    assert kernel.contents()["addr"] == slots(k, "10.65.1.2")[0]
    assert table.held_back() == {}
    # Contested again, then not: the other service moves to an address of its own.
    table.set_service(first)
    assert set(table.held_back()) == {"service prod/b"}
    table.set_service(replace(second, external_ips=("192.0.2.8",)))
    assert table.held_back() == {}


def test_source_ranges_guard_load_balancer_ips_merged_per_family() -> None:
    service = svc(
        b("10.65.1.1"),
        external_ips=("192.0.2.7",),
        load_balancer_ips=("198.51.100.1",),
        source_ranges=("10.0.0.0/8", "10.1.0.0/16", "fd00::/8"),
    )
    got = contribution(service)
    k = key("198.51.100.1")
    assert got["fw"] == {encoded(k)}  # not the external IP, not the cluster IP
    low, high = addr("10.0.0.0").value, addr("10.255.255.255").value
    assert got["fw_allowed"] == {ranged(k + low, k + high)}  # one range: 10.1/16 is inside
    v6 = ServiceLayout(6, "cali-svc", 0x4000000)
    assert "fw" not in contribution(service, v6)  # no IPv6 load-balancer IP


# --- ClientIP affinity: what the packet path remembers, swept -------------------------


def remembered(kernel: FakeSets, client: str, backend: str, *, node_port: int = 0) -> bytes:
    """An entry as the packet path records it: client . frontend -> backend."""
    frontend = np_key(node_port) if node_port else key("10.96.0.10")
    entry = addr(client).value + frontend
    prefix = "np_" if node_port else ""
    kernel.sets.setdefault(f"{prefix}aff_addr", {})[entry] = encoded(entry, addr(backend).value)
    kernel.sets.setdefault(f"{prefix}aff_port", {})[entry] = encoded(entry, port(8080).value)
    return entry


def held(kernel: FakeSets, name: str = "aff_addr") -> set[bytes]:
    return set(kernel.sets.get(name, {}))


def test_affinity_elements_name_each_frontend_and_its_live_backends() -> None:
    made = LAYOUT.contribution(svc(b("10.65.1.1"), b("10.65.1.2"), session_affinity=True))
    (front,) = made.frontends.values()
    assert front.elements["aff"] == (encoded(key("10.96.0.10")),)
    live = {
        encoded(key("10.96.0.10") + addr(a).value + port(8080).value + b"\0\0")
        for a in ("10.65.1.1", "10.65.1.2")
    }
    assert set(front.elements["aff_live_10800"]) == live
    # IPv6 the same (its keys 16-byte addresses); none without the field.
    v6 = ServiceLayout(6, "cali-svc", 0x4000000)
    dual = svc(b("fd00:65::1"), cluster_ips=("fd00:96::10",), session_affinity=True)
    (front6,) = v6.contribution(dual).frontends.values()
    vip6 = addr("fd00:96::10").value + key("10.96.0.10")[4:]  # protocol . port as above
    assert front6.elements["aff"] == (encoded(vip6),)
    assert set(front6.elements["aff_live_10800"]) == {
        encoded(vip6 + addr("fd00:65::1").value + port(8080).value + b"\0\0")
    }
    assert "aff" not in contribution(svc(b("10.65.1.1")))


def test_a_removed_backend_takes_its_clients_entries_along() -> None:
    kernel, nft = FakeSets(), Nft()
    table = ServiceTable(LAYOUT, nft, kernel, kernel)
    table.set_pools(["10.65.0.0/16"])
    table.set_service(svc(b("10.65.1.1"), b("10.65.1.2"), session_affinity=True))
    trio.run(table.apply)
    to_one = remembered(kernel, "10.65.9.1", "10.65.1.1")
    remembered(kernel, "10.65.9.2", "10.65.1.2")
    unknown = remembered(kernel, "10.65.9.3", "10.65.1.2", node_port=30099)

    table.set_service(svc(b("10.65.1.1"), session_affinity=True))
    trio.run(table.apply)
    assert held(kernel) == held(kernel, "aff_port") == {to_one}
    assert held(kernel, "np_aff_addr") == {unknown}  # another frontend: not this sweep's
    assert table.swept == 2

    # A backend added narrows nothing: nothing read, nothing deleted.
    table.set_service(svc(b("10.65.1.1"), b("10.65.1.3"), session_affinity=True))
    trio.run(table.apply)
    assert table.swept == 2
    # A resync checks every entry: one of a frontend without affinity goes.
    table.mark_for_resync()
    trio.run(table.apply)
    assert held(kernel, "np_aff_addr") == set() and held(kernel) == {to_one}
    # Affinity off: its entries go.
    table.set_service(svc(b("10.65.1.1"), b("10.65.1.3")))
    trio.run(table.apply)
    assert held(kernel) == held(kernel, "aff_port") == set()


def test_local_policy_sweeps_outside_clients_off_remote_backends_only() -> None:
    kernel, nft = FakeSets(), Nft()
    table = ServiceTable(LAYOUT, nft, kernel, kernel)
    table.set_pools(["10.65.0.0/16"])
    both = (b("10.65.1.1", local=True), b("10.65.1.2"))
    fields: dict[str, object] = {"session_affinity": True, "external_ips": ("198.51.100.1",)}
    fields["cluster_ips"] = ()
    table.set_service(svc(*both, **fields))
    trio.run(table.apply)
    frontend = key("198.51.100.1")

    def entry(client: str, backend: str) -> bytes:
        k = addr(client).value + frontend
        kernel.sets.setdefault("aff_addr", {})[k] = encoded(k, addr(backend).value)
        kernel.sets.setdefault("aff_port", {})[k] = encoded(k, port(8080).value)
        return k

    pod = entry("10.65.9.1", "10.65.1.2")  # a pod on the remote backend: still allowed
    outside = entry("203.0.113.7", "10.65.1.2")  # from outside: Local allows the local one only
    local = entry("203.0.113.8", "10.65.1.1")
    table.set_service(svc(*both, external_local=True, **fields))
    trio.run(table.apply)
    assert held(kernel) == {pod, local}
    assert outside not in held(kernel, "aff_port")


def test_an_entry_that_expires_during_the_sweep_is_read_again() -> None:
    reads: list[str] = []

    class Expiring(FakeSets):
        def elements(self, family: int, table: str, set_name: str) -> list[ReadElement]:
            found = super().elements(family, table, set_name)
            if not set_name.endswith(("aff_addr", "aff_port")):
                return found  # (the first apply reads every set: nothing in place yet)
            reads.append(set_name)
            if 4 < len(reads) <= 6:  # the sweep's first read: one that expires before the delete
                gone = addr("10.65.9.9").value + key("10.96.0.10")
                to = addr("10.65.1.2") if set_name == "aff_addr" else port(8080)
                found.append(ReadElement(gone, to.value))
            return found

    kernel, nft = Expiring(), Nft()
    table = ServiceTable(LAYOUT, nft, kernel, kernel)
    table.set_service(svc(b("10.65.1.1"), b("10.65.1.2"), session_affinity=True))
    trio.run(table.apply)
    stays = remembered(kernel, "10.65.9.1", "10.65.1.1")
    leaves = remembered(kernel, "10.65.9.2", "10.65.1.2")
    table.set_service(svc(b("10.65.1.1"), session_affinity=True))
    trio.run(table.apply)  # ENOENT for the expired one, then read again
    assert held(kernel) == {stays} and leaves not in held(kernel, "aff_port")
    assert len(reads) == 4 + 4 + 4  # the first apply's full check, two tries of four maps


# --- refresh: reading back beside the applies ----------------------------------------


def test_a_refresh_of_what_was_written_marks_nothing_and_tampering_is_repaired() -> None:
    nft = Nft()
    kernel = FakeSets(nft)
    table = ServiceTable(LAYOUT, nft, kernel, kernel)
    table.set_pools(["10.65.0.0/16"])
    table.set_service(svc(b("10.65.1.1"), b("10.65.1.2"), session_affinity=True))
    trio.run(table.apply)
    assert not trio.run(table.refresh) and not trio.run(table.refresh)
    writes = kernel.transactions
    trio.run(table.apply)
    assert kernel.transactions == writes

    wanted_fe = dict(kernel.sets["fe"])
    kernel.sets["fe"].clear()
    stray = encoded(key("10.96.9.9"))
    kernel.sets.setdefault("refused", {})[key("10.96.9.9")] = stray
    assert trio.run(table.refresh)
    trio.run(table.apply)
    assert kernel.sets["fe"] == wanted_fe and kernel.sets["refused"] == {}
    assert kernel.transactions == writes + 1 and len(nft.scripts) == 1


class HeldRead(FakeSets):
    """Holds the read of one set, once armed, until the loop has done
    something meanwhile (see :func:`refresh_racing`)."""

    def __init__(self, nft: Nft, set_name: str) -> None:
        super().__init__(nft)
        self.held_set = set_name
        self.armed = False  # (the first apply reads too)
        self.reading, self.done = threading.Event(), threading.Event()

    def elements(self, family: int, table: str, set_name: str) -> list[ReadElement]:
        found = super().elements(family, table, set_name)
        if set_name == self.held_set and self.armed:
            self.reading.set()
            self.done.wait(10)
        return found


def refresh_racing(
    table: ServiceTable, kernel: HeldRead, meanwhile: Callable[[], Awaitable[object]]
) -> bool:
    """A refresh whose read of the held set is compared only after
    ``meanwhile`` has run on the loop; what the refresh returned."""
    kernel.armed = True

    async def race() -> bool:
        result: list[bool] = []
        async with trio.open_nursery() as nursery:

            async def refresh() -> None:
                result.append(await table.refresh())

            nursery.start_soon(refresh)
            await trio.to_thread.run_sync(kernel.reading.wait)
            await meanwhile()
            kernel.done.set()
        return result[0]

    return trio.run(race)


def test_a_set_written_while_the_refresh_reads_is_left_to_the_next_one() -> None:
    """The read of a set that an apply then changes is stale: were it
    compared, the apply's deletions would look like elements to delete
    again, which the kernel refuses."""
    nft = Nft()
    kernel = HeldRead(nft, "addr")
    table = ServiceTable(LAYOUT, nft, kernel, kernel)
    table.set_service(svc(b("10.65.1.1"), b("10.65.1.2")))
    trio.run(table.apply)

    async def change() -> None:  # read; this changes it before it is compared
        table.set_service(svc(b("10.65.1.1")))  # 10.65.1.2's slot goes
        await table.apply()

    assert not refresh_racing(table, kernel, change)
    trio.run(table.apply)  # nothing stale to delete: nothing refused
    assert kernel.contents() == {n: e for n, e in wanted({"web": svc(b("10.65.1.1"))}).items() if e}


_TARGETS = [(addr(f"10.65.0.{i}").value, port(8080).value) for i in range(1, 5)]
_target_sets = st.frozensets(st.sampled_from(_TARGETS))


_affinities = st.builds(
    # A frontend with affinity has somewhere to go (the layout makes none
    # otherwise); Local policy's outside targets are some of everyone's.
    lambda every, outside: Affinity(
        False, key("10.96.0.10"), 60, every, None if outside is None else outside & every
    ),
    st.frozensets(st.sampled_from(_TARGETS), min_size=1),
    st.one_of(st.none(), _target_sets),
)


@given(_affinities, st.one_of(st.none(), _affinities))
def test_a_frontend_narrows_exactly_when_some_remembered_client_loses_its_backend(
    old: Affinity, new: Affinity | None
) -> None:
    """``narrowed`` (which decides a sweep) is true iff some client, from
    the pools or from outside, may be sent to a backend under the old
    affinity that the new one no longer allows."""
    lost = any(
        old.allows(t, from_pools=p) and (new is None or not new.allows(t, from_pools=p))
        for t in _TARGETS
        for p in (True, False)
    )
    assert old.narrowed(new) == lost
    if new is not None:
        assert not new.narrowed(new)  # the same affinity again sweeps nothing
