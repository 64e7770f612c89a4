"""A backend's address takes a shorter way (no field name made unless it is
refused): on every text, the address or refusal ``scalars.address`` gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.errors import InputError
from dataplane.managers.convert_services import _backend_address
from dataplane.managers.scalars import address

TEXTS = st.one_of(
    st.sampled_from(
        [
            "10.65.1.2", "010.65.1.2", "10.65.1", "10.65.1.256", " 10.65.1.2", "10.65.1.2\n",
            "fd00::1", "FD00:0::1", "::ffff:10.1.2.3", "fe80::1%eth0", "", "pod", "1.2.3.4\0",
        ]
    ),
    st.ip_addresses().map(str),
    st.text(alphabet="0123456789.:abcdefABCDEF% ", max_size=20),
)  # fmt: skip


@settings(max_examples=1000, deadline=None)
@given(TEXTS, st.integers(0, 9), st.integers(0, 3))
def test_a_backend_address_is_what_scalars_address_makes(text: str, i: int, k: int) -> None:
    field = f"backends[{i}].addresses[{k}]"
    try:
        expected = address(text, field)
    except InputError as exc:
        try:
            _backend_address(text, i, k)
        except InputError as got:
            assert str(got) == str(exc)
        else:
            raise AssertionError(f"{text!r} taken, scalars.address refuses it") from None
        return
    assert _backend_address(text, i, k) == expected
