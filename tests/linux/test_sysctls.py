"""Interface sysctls: one interface that refuses a write never blocks others."""

from __future__ import annotations

from pathlib import Path

import trio

from dataplane.linux.sysctls import SysctlWriter


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
    assert set(writer.failed) == {"cali1"}
    assert (tmp_path / "net/ipv4/conf/cali2/proxy_arp").read_text() == "1"
    assert (tmp_path / "net/ipv4/conf/cali2/rp_filter").read_text() == "1"
    # Repaired: the next apply configures it and clears the failure.
    bad.rmdir()
    bad.write_text("0")
    trio.run(main)
    assert writer.failed == {}
    assert bad.read_text() == "1"
