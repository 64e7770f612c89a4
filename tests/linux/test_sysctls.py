"""Interface sysctls: one interface that refuses a write never blocks others;
what is read ahead (while the rules commit) ends where the apply alone does."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.linux.kernel.sysctl_state import SysctlOriginals, namespace_identity
from dataplane.linux.kernel.sysctls import SysctlWriter


def _tree(root: Path, *ifaces: str) -> None:
    for key in ("net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"):
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_text("0\n")
    for iface in ifaces:
        for family in ("ipv4", "ipv6"):
            conf = root / "net" / family / "conf" / iface
            conf.mkdir(parents=True)
            for name in ("forwarding", "proxy_arp", "proxy_arp_delay", "rp_filter", "accept_ra"):
                (conf / name).write_text("0\n")


def test_a_refusing_interface_is_reported_and_the_rest_configured(tmp_path: Path) -> None:
    _tree(tmp_path, "cali1", "cali2")
    # cali1's proxy_arp cannot be written (a directory where the file is).
    bad = tmp_path / "net/ipv4/conf/cali1/proxy_arp"
    bad.unlink()
    bad.mkdir()
    writer = SysctlWriter(tmp_path)

    async def main() -> None:
        await writer.apply([("cali1", 1, True), ("cali2", 2, True)])

    trio.run(main)
    assert set(writer.held_back()) == {"cali1"}
    assert (tmp_path / "net/ipv4/conf/cali2/proxy_arp").read_text() == "1"
    assert (tmp_path / "net/ipv4/conf/cali2/rp_filter").read_text() == "1"
    # Reported once, not at every retry.
    assert [iface for iface, _ in writer.take_refusals()] == ["cali1"]
    trio.run(main)
    assert writer.take_refusals() == [] and set(writer.held_back()) == {"cali1"}
    # Repaired: the next apply configures it and clears the failure.
    bad.rmdir()
    bad.write_text("0")
    trio.run(main)
    assert writer.held_back() == {} and writer.take_refusals() == []
    assert bad.read_text() == "1"


V4, V6 = "net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"


def _apply(writer: SysctlWriter) -> None:
    trio.run(writer.apply, [])


def _cleanup(root: Path, state: Path) -> None:
    # A separate process, later: nothing but the state file remembers.
    trio.run(SysctlWriter(root, originals=SysctlOriginals(state)).cleanup, [])


def test_cleanup_restores_the_forwarding_the_driver_found(tmp_path: Path) -> None:
    root, state = tmp_path / "proc", tmp_path / "state" / "sysctls.json"
    _tree(root)
    _apply(SysctlWriter(root, originals=SysctlOriginals(state)))
    assert (root / V4).read_text() == (root / V6).read_text() == "1"
    # A restart finds its own value: the original survives it.
    _apply(SysctlWriter(root, originals=SysctlOriginals(state)))
    assert [k for k, *_ in SysctlOriginals(state).items()] == [V4, V6]
    _cleanup(root, state)
    assert (root / V4).read_text().strip() == (root / V6).read_text().strip() == "0"
    assert not state.exists()


def test_cleanup_never_flips_what_the_operator_set(tmp_path: Path) -> None:
    root, state = tmp_path / "proc", tmp_path / "sysctls.json"
    _tree(root)
    (root / V4).write_text("1\n")  # on before the driver came: not ours
    _apply(SysctlWriter(root, originals=SysctlOriginals(state)))
    assert V4 not in SysctlOriginals(state)
    # Changed again after we set it (any value but ours): the operator's now.
    (root / V6).write_text("2\n")
    _cleanup(root, state)
    assert (root / V4).read_text() == "1\n"
    assert (root / V6).read_text() == "2\n"
    assert not state.exists()


def test_without_its_records_cleanup_restores_nothing(tmp_path: Path) -> None:
    root, state = tmp_path / "proc", tmp_path / "sysctls.json"
    _tree(root)
    _apply(SysctlWriter(root, originals=SysctlOriginals(state)))
    state.write_text("{not json")
    _cleanup(root, state)
    assert (root / V4).read_text() == (root / V6).read_text() == "1"


def test_a_missing_ipv6_sysctl_is_not_recorded(tmp_path: Path) -> None:
    # IPv6 disabled on the host: there is nothing to set, so nothing to restore.
    root, state = tmp_path / "proc", tmp_path / "sysctls.json"
    _tree(root)
    (root / V6).unlink()
    _apply(SysctlWriter(root, originals=SysctlOriginals(state)))
    assert [k for k, *_ in SysctlOriginals(state).items()] == [V4]


BOOT = "5c1e6f0a-0000-4000-8000-000000000001"
HERE, THERE = f"{BOOT}/cookie:7", f"{BOOT}/cookie:9"


def test_a_record_is_restored_only_in_the_namespace_it_was_taken_in(tmp_path: Path) -> None:
    """One file, two namespaces: a cleanup in the second never writes the
    first's original into it (the host's forwarding, on for its own reasons)."""
    ns_a, ns_b, state = tmp_path / "a", tmp_path / "b", tmp_path / "sysctls.json"
    _tree(ns_a)
    _tree(ns_b)
    _apply(SysctlWriter(ns_a, originals=SysctlOriginals(state, namespace=HERE)))
    (ns_b / V4).write_text("1\n")  # the other namespace forwards already
    trio.run(SysctlWriter(ns_b, originals=SysctlOriginals(state, namespace=THERE)).cleanup, [])
    assert (ns_b / V4).read_text() == "1\n"
    assert [k for k, *_ in SysctlOriginals(state, namespace=HERE).items()] == [V4, V6]
    trio.run(SysctlWriter(ns_a, originals=SysctlOriginals(state, namespace=HERE)).cleanup, [])
    assert (ns_a / V4).read_text().strip() == "0"
    assert not state.exists()


def test_drivers_in_two_namespaces_keep_each_other_s_records(tmp_path: Path) -> None:
    ns_a, ns_b, state = tmp_path / "a", tmp_path / "b", tmp_path / "sysctls.json"
    _tree(ns_a)
    _tree(ns_b)
    first = SysctlOriginals(state, namespace=HERE)  # loaded before the other saves
    _apply(SysctlWriter(ns_b, originals=SysctlOriginals(state, namespace=THERE)))
    _apply(SysctlWriter(ns_a, originals=first))
    assert [k for k, *_ in SysctlOriginals(state, namespace=THERE).items()] == [V4, V6]
    assert [k for k, *_ in SysctlOriginals(state, namespace=HERE).items()] == [V4, V6]


def test_records_of_an_earlier_boot_or_without_a_namespace_are_never_restored(
    tmp_path: Path,
) -> None:
    root, state = tmp_path / "proc", tmp_path / "sysctls.json"
    _tree(root)
    (root / V4).write_text("1\n")
    old = {"sysctls": {V4: {"original": "0", "ours": "1"}}}
    state.write_text(json.dumps(old))  # this file's format before namespaces
    assert SysctlOriginals(state, namespace=HERE).items() == []
    earlier = {"namespaces": {"an-earlier-boot/cookie:7": old}}
    state.write_text(json.dumps(earlier))
    assert SysctlOriginals(state, namespace=HERE).items() == []
    # The next save drops the earlier boot's entry: its namespace is gone.
    SysctlOriginals(state, namespace=HERE).record(V6, "0", "1")
    assert list(json.loads(state.read_text())["namespaces"]) == [HERE]
    assert (root / V4).read_text() == "1\n"


def test_this_process_has_a_namespace_identity() -> None:
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    identity = namespace_identity()
    assert identity.startswith(f"{boot}/") and identity == namespace_identity()


_VALUES = st.sampled_from(["0", "1", "80"])
_FILES = ("forwarding", "proxy_arp", "rp_filter", "accept_ra")


def _drawn_tree(root: Path, values: list[str], gone: set[str]) -> None:
    """cali1 and cali2 with the drawn values; the interfaces in ``gone``
    deleted (after the read ahead, in the tree read ahead)."""
    _tree(root, "cali1", "cali2")
    files = [
        root / "net" / family / "conf" / iface / name
        for iface in ("cali1", "cali2")
        for family in ("ipv4", "ipv6")
        for name in _FILES
    ]
    for path, value in zip(files, values, strict=False):
        path.write_text(value + "\n")
    for iface in gone:
        for family in ("ipv4", "ipv6"):
            shutil.rmtree(root / "net" / family / "conf" / iface)


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(_VALUES, min_size=16, max_size=16),
    st.sets(st.sampled_from(["cali1", "cali2"])),
    st.booleans(),
)
def test_a_read_ahead_then_the_apply_ends_where_the_apply_alone_does(
    values: list[str], gone: set[str], strict: bool
) -> None:
    """What the apply would read, read first (while the rules commit);
    interfaces may go between the two."""
    wanted = [("cali1", 1, strict), ("cali2", 2, not strict)]
    with tempfile.TemporaryDirectory() as alone, tempfile.TemporaryDirectory() as ahead:
        first, second = Path(alone), Path(ahead)
        _drawn_tree(first, values, gone)
        _drawn_tree(second, values, set())
        plain, reading = SysctlWriter(first), SysctlWriter(second)
        trio.run(reading.read_ahead, wanted)
        for iface in gone:
            for family in ("ipv4", "ipv6"):
                shutil.rmtree(second / "net" / family / "conf" / iface)
        trio.run(plain.apply, wanted)
        trio.run(reading.apply, wanted)
        assert _files(first) == _files(second)
        assert plain.writes == reading.writes
        assert plain.held_back() == reading.held_back() == {}


def test_the_apply_takes_what_was_read_ahead_once(tmp_path: Path) -> None:
    """A value changed between the read ahead and the apply is not seen by
    that apply (it would not be just after its write either); the next
    resync finds it, with nothing left over from the read ahead."""
    _tree(tmp_path, "cali1")
    writer = SysctlWriter(tmp_path)
    arp = tmp_path / "net/ipv4/conf/cali1/proxy_arp"
    arp.write_text("1\n")
    trio.run(writer.read_ahead, [("cali1", 1, True)])
    arp.write_text("0\n")  # between: another hand
    trio.run(writer.apply, [("cali1", 1, True)])
    assert arp.read_text() == "0\n"
    writer.mark_for_resync()
    trio.run(writer.apply, [("cali1", 1, True)])
    assert arp.read_text() == "1"


def test_what_an_apply_that_failed_before_the_sysctls_read_ahead_is_never_used(
    tmp_path: Path,
) -> None:
    """The platform forgets it after every apply: a later apply with no
    rules to commit (nothing read ahead) reads the files for itself."""
    _tree(tmp_path, "cali1")
    writer = SysctlWriter(tmp_path)
    arp = tmp_path / "net/ipv4/conf/cali1/proxy_arp"
    arp.write_text("1\n")
    trio.run(writer.read_ahead, [("cali1", 1, True)])
    writer.forget_ahead()  # that apply failed before the sysctls
    arp.write_text("0\n")
    trio.run(writer.apply, [("cali1", 1, True)])
    assert arp.read_text() == "1"
