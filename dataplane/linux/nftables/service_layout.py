"""The nftables services table: kube-proxy's semantics as set and map elements. Pure.

One table per IP family (``ip``/``ip6``), made once with a fixed set of
rules; every service change after that is elements only, so the kernel
never re-validates the table and ``nft`` never has to fetch it
(``docs/nftables.md``). A *frontend* is a cluster, external or
load-balancer address with a protocol and port (key ``daddr . l4proto .
dport``), or a node port on any local address (key ``l4proto . dport``,
the ``np_`` sets). Its backends are map elements ``frontend . slot ->
address`` (map ``addr``) and ``frontend . slot -> port`` (map ``port``);
a frontend with *S* slots sits in set ``fe_S`` and a rule per slot count
picks the slot from the kernel's hash of the flow (``symhash mod S``,
addresses, ports and protocol), looked up in both maps: the same hash,
so the same slot -- two lookups could disagree with ``numgen random``,
and ``jhash`` of an IPv6 client runs out of registers:

* up to :data:`EXACT` backends, one slot each: exactly equal odds, as
  kube-proxy's probabilities give;
* more, a power of two of at least ``EXACT`` slots per backend, dealt
  round robin: each backend's share is within 1/``EXACT`` of equal.

Where traffic goes and what is masqueraded, as kube-proxy means it:

* cluster IPs: every usable backend, or the node's own with
  ``internalTrafficPolicy: Local``; not masqueraded;
* external and load-balancer IPs and node ports, ``Cluster`` policy: every
  backend, marked for masquerade (set ``masq``);
* the same with ``Local`` policy: traffic from outside (not from a pool,
  not from a local address) goes to local backends only, unmasqueraded,
  so backends see the client (``ext_local``, ``lfe_S``, ``local_addr``,
  ``local_port``); pods and the node itself reach every backend, the
  node masqueraded (``masq_local``);
* after DNAT, in postrouting: hairpin (a backend reaching itself, set
  ``hairpin`` of ``address . address``) and an off-node backend reached
  from outside the pools (set ``remote``) are masqueraded;
* a frontend with no usable backend at all is rejected at once (set
  ``refused``); one whose policy leaves nowhere to go, but the service has
  backends, is dropped (``dropped``; ``dropped_outside`` for Local-policy
  traffic from outside with no local backend).

Why two maps and not one of ``address . port`` values: nft 1.0.6 cannot
evaluate a rule against such a map once it exists in the kernel (its
``typeof`` value, re-read, fails with "conflicting protocols specified:
ip vs. th"), so the table could never be re-asserted after a restart;
spelling the value's port as ``tcp dport`` instead makes nft add a
``meta l4proto tcp`` test to the first rule using the map, which breaks
UDP. Single-field values have neither problem.

A backend change goes in force without deleting anything: the new slots
are added to a second bank (count set ``fe1_S``, gate ``fe1``, slots
:data:`BANK` + *i*, rules reached first) in a transaction of their own;
the first bank is rewritten and the second emptied afterwards
(:mod:`~dataplane.linux.nftables.service_banks`).

A load-balancer IP with ``loadBalancerSourceRanges`` is in set ``fw``,
its allowed sources (the frontend and a source range) in interval set
``fw_allowed``; a new connection from elsewhere is dropped.

ClientIP affinity (both families; IPv6's record rules through netlink): a frontend
in set ``aff`` sends a client the packet path remembered (maps
``aff_addr``/``aff_port``) to the same backend; set ``aff_live_T`` (T its
timeout) holds the frontend's usable ``frontend . backend`` pairs, the
only ones remembered. What a frontend's clients may still be sent to is
:class:`Affinity`: the programmer sweeps the maps of entries that left it.

Health-check node ports are the platform's HTTP server.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network, collapse_addresses, ip_network
from socket import AF_INET, AF_INET6, inet_pton

from dataplane.linux.nftables.elements import (
    NFPROTO_IPV4,
    NFPROTO_IPV6,
    addr,
    concat,
    encoded,
    encoder,
    port,
    proto,
    ranged,
)
from dataplane.linux.nftables.names import nft_name
from dataplane.linux.nftables.service_rules import (
    AFFINITY_MAPS,
    BANK,
    EXACT,
    element_sets,
    live_set,
    slot_count,
    slot_counts,
    structure,
)
from dataplane.linux.nftables.service_shared import shared
from dataplane.model.services import Backend, Service, ServicePort

__all__ = [
    "AFFINITY_MAPS",
    "BANK",
    "EXACT",
    "NOTHING",
    "Affinity",
    "Contribution",
    "Elements",
    "FrontendElements",
    "Outline",
    "ServiceLayout",
    "slot_count",
    "slot_counts",
]

_PROTOCOLS = {"tcp": 6, "udp": 17, "sctp": 132}
_SLOT_AT = struct.Struct("=I")


Target = tuple[bytes, bytes]  # a backend's address and port, as the maps hold them
# A set's elements as one frontend or service adds them, sorted so equal
# sets are equal tuples: a tuple of ten takes a sixth of a frozenset's
# memory, and the table keeps one per set of every frontend (about 20 MB
# at 10,000 services of 10 endpoints as frozensets).
Elements = tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class Affinity:
    """Where a ClientIP-affinity frontend may send a remembered client: an
    entry of the affinity maps pointing elsewhere is stale."""

    node_port: bool
    key: bytes  # the frontend's part of an entry's key (after the client address)
    timeout: int  # seconds
    everyone: frozenset[Target]
    outside: frozenset[Target] | None  # Local policy: for clients outside the pools

    def allows(self, target: Target, *, from_pools: bool) -> bool:
        if target not in self.everyone:
            return False
        return from_pools or self.outside is None or target in self.outside

    def narrowed(self, new: Affinity | None) -> bool:
        """Whether some client may be sent somewhere under this that it may
        not under ``new`` (None: the frontend has no affinity any more)."""
        if new is None or not self.everyone <= new.everyone:
            return True
        old_outside = self.everyone if self.outside is None else self.outside
        new_outside = new.everyone if new.outside is None else new.outside
        return not old_outside <= new_outside


@dataclass(frozen=True, slots=True)
class FrontendElements:
    """What one frontend adds to each set and map: elements as the kernel
    reads them (see elements.encoded), which is also their identity."""

    label: str  # "10.96.0.10 tcp/80", "node port tcp/30080": for reports
    elements: Mapping[str, Elements]
    affinity: Affinity | None = None


@dataclass(frozen=True, slots=True)
class Contribution:
    """What one service adds to the table."""

    # By frontend identity: two services claiming one frontend conflict.
    frontends: Mapping[bytes, FrontendElements]
    shared: Mapping[str, Elements]  # counted: several services may add one


NOTHING = Contribution({}, {})


@dataclass(frozen=True, slots=True)
class Outline:
    """What one service claims, its elements aside (:meth:`ServiceLayout.outline`)."""

    frontends: tuple[bytes, ...]  # their identities, as Contribution.frontends
    timeouts: frozenset[int]  # of its frontends' ClientIP affinity
    shared: Mapping[str, Elements]


# A service's backends are encoded a few times over (slots, local slots,
# affinity, shared); addresses rarely recur across services, so a cache
# as large as a node's endpoints (it was 65,536: 10 MB) only holds memory.
@functools.lru_cache(maxsize=1 << 10)
def _addr(text: str) -> bytes:
    return inet_pton(AF_INET6 if ":" in text else AF_INET, text)  # addr(), without its Field


@functools.lru_cache(maxsize=1 << 12)
def _port(number: int) -> bytes:
    return port(number).value


# integer(i).value, packed directly (the Field objects cost 70 ms of every
# start), and kept for the slot numbers of up to 128 backends; every slot
# (MAX_SLOTS) would be 9 ms of every start and 3 MB.
_KEPT_SLOTS = 4096
_SLOTS = tuple(map(_SLOT_AT.pack, range(_KEPT_SLOTS)))


def _family(address: str) -> int:
    return 6 if ":" in address else 4


@dataclass(frozen=True, slots=True)
class _Frontend:
    key: bytes  # concat() of daddr . l4proto . dport, or l4proto . dport
    label: str
    node_port: bool
    everyone: tuple[tuple[str, int], ...]  # for pods and the node (and outside, if not Local)
    outside: tuple[tuple[str, int], ...] | None  # Local policy: for outside traffic
    masq: bool  # Cluster policy, external: always masqueraded
    refuse: str  # with nowhere to go: "refused" (no backends at all) or "dropped"
    # loadBalancerSourceRanges of a load-balancer IP (None: open to all).
    ranges: tuple[IPv4Network | IPv6Network, ...] | None = None
    affinity: int | None = None  # ClientIP affinity's timeout, seconds


def _encoded(targets: Sequence[tuple[str, int]]) -> frozenset[Target]:
    return frozenset((_addr(a), _port(n)) for a, n in targets)


def _ident(f: _Frontend) -> bytes:
    """A frontend's identity: two services claiming one conflict."""
    return (b"n" if f.node_port else b"r") + f.key


def _affinity(f: _Frontend) -> Affinity | None:
    if f.affinity is None or not f.everyone:
        return None
    outside = None if f.outside is None else _encoded(f.outside)
    return Affinity(f.node_port, f.key, f.affinity, _encoded(f.everyone), outside)


@dataclass(frozen=True, slots=True)
class ServiceLayout:
    """The services table of one IP family: its structure and each service's elements."""

    version: int
    table: str
    masq_mark: int

    def __post_init__(self) -> None:
        # Both go into the nft script: refused here, never written.
        nft_name(self.table)
        if self.version not in (4, 6) or not 0 < self.masq_mark <= 0xFFFFFFFF:
            raise ValueError(f"IPv{self.version}, mark 0x{self.masq_mark:x}: not a services table")

    @property
    def family(self) -> str:
        return "ip" if self.version == 4 else "ip6"

    @property
    def nfproto(self) -> int:
        return NFPROTO_IPV4 if self.version == 4 else NFPROTO_IPV6

    # --- elements --------------------------------------------------------------------

    def _targets(self, backends: Sequence[Backend], sp: ServicePort) -> tuple[tuple[str, int], ...]:
        out = []
        for backend in backends:
            number = backend.port_for(sp)
            if number is not None and _family(backend.address) == self.version:
                out.append((backend.address, number))
        return tuple(out)

    def _frontends(
        self, service: Service, everyone: tuple[Backend, ...], *, targets: bool = True
    ) -> Iterator[_Frontend]:
        """Each frontend; without ``targets`` (an outline), their backends
        only where an affinity needs to know whether there are any (the
        rest get none: their slots are not made)."""
        if service.type == "ExternalName":
            return
        sticky = service.affinity_timeout if service.session_affinity else None
        targets = targets or sticky is not None
        local = service.usable(local_only=True) if targets else ()
        for sp in service.ports:
            number = _PROTOCOLS.get(sp.protocol)
            if number is None:
                continue
            p = proto(number)
            every = self._targets(everyone, sp) if targets else ()
            mine = self._targets(local, sp) if targets else ()
            refuse = "dropped" if every else "refused"
            for vip in service.cluster_ips:
                if _family(vip) == self.version:
                    internal = mine if service.internal_local else every
                    key = concat((addr(vip), p, port(sp.port)))
                    label = f"{vip} {sp.protocol}/{sp.port}"
                    yield _Frontend(
                        key, label, False, internal, None, False, refuse, affinity=sticky
                    )
            # kube-proxy filters load-balancer IPs only by the source ranges.
            ranges = self._ranges(service.source_ranges) if service.source_ranges else None
            keys: list[tuple[str | None, bool, tuple[IPv4Network | IPv6Network, ...] | None]]
            keys = [(a, False, None) for a in service.external_ips if _family(a) == self.version]
            keys += [
                (a, False, ranges) for a in service.load_balancer_ips if _family(a) == self.version
            ]
            if sp.node_port:
                keys.append((None, True, None))
            for address, is_node_port, fw in keys:
                if address is None:
                    key = concat((p, port(sp.node_port)))
                    label = f"node port {sp.protocol}/{sp.node_port}"
                else:
                    key = concat((addr(address), p, port(sp.port)))
                    label = f"{address} {sp.protocol}/{sp.port}"
                if service.external_local:
                    yield _Frontend(
                        key, label, is_node_port, every, mine, False, refuse, fw, sticky
                    )
                else:
                    yield _Frontend(key, label, is_node_port, every, None, True, refuse, fw, sticky)

    def _ranges(self, prefixes: Sequence[str]) -> tuple[IPv4Network | IPv6Network, ...]:
        """This family's source ranges, merged: the kernel refuses
        overlapping ranges in one set."""
        nets = [ip_network(p, strict=False) for p in prefixes]
        mine = [n for n in nets if n.version == self.version]
        return tuple(collapse_addresses(mine))  # type: ignore[type-var]  # one family, checked above

    def _slots(
        self, key: bytes, targets: tuple[tuple[str, int], ...]
    ) -> tuple[int, list[bytes], list[bytes]]:
        """The slot count, and each slot's address and port elements."""
        count = slot_count(len(targets))
        slot_key = len(key) + _SLOT_AT.size
        to_addr = encoder(slot_key, 4 if self.version == 4 else 16)  # targets: this family's
        to_port = encoder(slot_key, 2)
        encoded_targets = [(_addr(a), _port(n)) for a, n in targets]
        addrs, ports = [], []
        for i in range(count):
            address, number = encoded_targets[i % len(targets)]
            slot = key + (_SLOTS[i] if i < _KEPT_SLOTS else _SLOT_AT.pack(i))
            addrs.append(to_addr(slot, address))
            ports.append(to_port(slot, number))
        return count, addrs, ports

    def contribution(self, service: Service) -> Contribution:
        """What ``service`` adds: per frontend, and shared (a backend's
        hairpin pair or remote address appears in every service that has it)."""
        everyone = service.usable(local_only=False)
        return Contribution(self._own(service, everyone), self._shared(service, everyone))

    def frontends(self, service: Service) -> dict[bytes, FrontendElements]:
        """:meth:`contribution`'s frontends alone."""
        return self._own(service, service.usable(local_only=False))

    def outline(self, service: Service) -> Outline:
        """What :meth:`contribution` claims, without the frontends' elements
        (a third of its cost): enough where every element is written whole."""
        everyone = service.usable(local_only=False)
        idents: dict[bytes, None] = {}
        timeouts = set()
        for f in self._frontends(service, everyone, targets=False):
            ident = _ident(f)
            if ident not in idents:
                idents[ident] = None
                if f.affinity is not None and f.everyone:  # as _affinity() has one
                    timeouts.add(f.affinity)
        return Outline(tuple(idents), frozenset(timeouts), self._shared(service, everyone))

    def _own(
        self, service: Service, everyone: tuple[Backend, ...]
    ) -> dict[bytes, FrontendElements]:
        frontends: dict[bytes, FrontendElements] = {}
        for f in self._frontends(service, everyone):
            ident = _ident(f)
            if ident not in frontends:  # a port listed twice: the first one
                frontends[ident] = FrontendElements(f.label, self._elements(f), _affinity(f))
        return frontends

    def _shared(self, service: Service, everyone: tuple[Backend, ...]) -> dict[str, Elements]:
        return {} if service.type == "ExternalName" else shared(self.version, everyone)

    def _elements(self, f: _Frontend) -> dict[str, Elements]:
        out: dict[str, set[bytes]] = {}

        def add(name: str, *elements: bytes) -> None:
            out.setdefault(name, set()).update(elements)

        p = "np_" if f.node_port else ""
        key = encoded(f.key)
        if f.ranges is not None:
            add("fw", key)
            add(
                "fw_allowed",
                *(
                    ranged(
                        f.key + _addr(str(n.network_address)),
                        f.key + _addr(str(n.broadcast_address)),
                    )
                    for n in f.ranges
                ),
            )
        if not f.everyone:  # nowhere to go for anyone (local backends are some of all)
            add(f"{p}{f.refuse}", key)
        else:
            count, addrs, ports = self._slots(f.key, f.everyone)
            add(f"{p}fe", key)
            add(f"{p}fe_{count}", key)
            add(f"{p}addr", *addrs)
            add(f"{p}port", *ports)
            if f.masq:
                add(f"{p}masq", key)
            if f.outside is not None:
                add(f"{p}masq_local", key)
                if f.outside:
                    count, addrs, ports = self._slots(f.key, f.outside)
                    add(f"{p}ext_local", key)
                    add(f"{p}lfe_{count}", key)
                    add(f"{p}local_addr", *addrs)
                    add(f"{p}local_port", *ports)
                else:
                    add(f"{p}dropped_outside", key)
            if f.affinity is not None:
                add(f"{p}aff", key)
                live = live_set(f.affinity, node_port=f.node_port)
                pairs = _encoded(f.everyone)
                add(live, *(encoded(f.key + a + n + b"\0\0") for a, n in pairs))  # port padded
        return {name: tuple(sorted(elements)) for name, elements in out.items()}

    # --- structure (service_rules.py) -------------------------------------------------

    def element_sets(self) -> tuple[str, ...]:
        """Every set and map of the table but the pools (see :func:`element_sets`)."""
        return element_sets()

    def structure(self, pools: Sequence[str], timeouts: Sequence[int] = ()) -> str:
        """The ``nft -f`` script that makes or re-asserts the table (see
        :func:`~dataplane.linux.nftables.service_rules.structure`)."""
        return structure(self.version, self.table, self.masq_mark, pools, timeouts)
