"""OverlayWriter: the overlay's IP sets follow every change, not only the first apply."""

from __future__ import annotations

from typing import cast

from dataplane.config import Config
from dataplane.linux.ipsets.programmer import IPSetsProgrammer
from dataplane.linux.netlink.overlay_plan import ALL_HOSTS_SET, VXLAN_SOURCES_SET
from dataplane.linux.render.chain_names import ChainNames
from dataplane.linux.writers.overlay import OverlayWriter
from dataplane.linux.writers.target import Target
from dataplane.model import IPSet
from dataplane.model.hosts import Encapsulation, Host
from dataplane.model.routes import Vtep, VtepAddress


class RecordingSets:
    """Stands in for the IP set programmer: the last desired value of each set."""

    def __init__(self) -> None:
        self.sets: dict[str, IPSet] = {}

    def replace(self, ipset: IPSet) -> None:
        self.sets[ipset.id] = ipset


def _vtep(n: int) -> Vtep:
    return Vtep(f"node-{n}", VtepAddress(f"66:00:00:00:00:{n:02x}", f"10.65.{n}.1", f"192.0.2.{n}"))


def _apply(writer: OverlayWriter, target: Target[object], everything: bool) -> None:
    # As LinuxPlatform._write: the plan first (for the NAT writer), then the writers.
    writer.plan(target.config, target.versions)
    writer.write(target, everything)


def test_a_vtep_added_after_the_first_apply_reaches_all_vxlan_net() -> None:
    sets = RecordingSets()
    config = Config(felix_hostname="node-1", vxlan_enabled=True)
    target: Target[object] = Target(
        (4,), config, ChainNames(), {}, cast(IPSetsProgrammer, sets), {}, {}
    )
    writer = OverlayWriter()
    writer.set_encapsulation(Encapsulation(vxlan=True))
    for n in (1, 2):
        writer.set_vtep(_vtep(n))
        writer.set_host(Host(f"node-{n}", ipv4=f"192.0.2.{n}"))
    _apply(writer, target, everything=True)
    assert sets.sets[VXLAN_SOURCES_SET].members == {"192.0.2.2"}

    writer.set_vtep(_vtep(3))
    writer.set_host(Host("node-3", ipv4="192.0.2.3"))
    _apply(writer, target, everything=False)
    assert sets.sets[VXLAN_SOURCES_SET].members == {"192.0.2.2", "192.0.2.3"}
    assert sets.sets[ALL_HOSTS_SET].members == {"192.0.2.1", "192.0.2.2", "192.0.2.3"}

    # Nothing changed: nothing rewritten.
    sets.sets.clear()
    _apply(writer, target, everything=False)
    assert sets.sets == {}
