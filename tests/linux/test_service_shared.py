"""The shared sets' elements, held to their definition: each element as
``encoded`` makes it from the backend's address (twice for a local one)."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from dataplane.linux.nftables.elements import addr, encoded
from dataplane.linux.nftables.service_shared import shared
from dataplane.model.services import Backend, BackendPort

_PORTS = (BackendPort("http", "TCP", 8080),)
_ADDRESSES = st.one_of(
    st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(lambda a: str(ipaddress.ip_address(a)))
)
_BACKENDS = st.lists(
    st.builds(Backend, address=_ADDRESSES, ports=st.just(_PORTS), local=st.booleans()),
    max_size=12,
)


def _defined(version: int, backends: list[Backend]) -> dict[str, tuple[bytes, ...]]:
    out: dict[str, set[bytes]] = {}
    for b in backends:
        if ipaddress.ip_address(b.address).version == version:
            packed = addr(b.address).value
            if b.local:
                out.setdefault("hairpin", set()).add(encoded(packed * 2))
            else:
                out.setdefault("remote", set()).add(encoded(packed))
    return {name: tuple(sorted(elements)) for name, elements in out.items()}


@given(st.sampled_from([4, 6]), _BACKENDS)
def test_each_backend_of_the_family_once_in_its_set(version: int, backends: list[Backend]) -> None:
    assert shared(version, tuple(backends)) == _defined(version, backends)
