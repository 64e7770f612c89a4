"""The pod MTU (Felix's rules for it), and the file's writes and failures."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dataplane.config import Config, parse_config
from dataplane.errors import ConfigError, ProgrammingError
from dataplane.linux.netlink.links import LinkState
from dataplane.linux.netlink.mtu_file import MtuFile, host_mtu, pod_mtu

PATTERN = Config().mtu_iface_pattern  # Felix's default


def test_the_host_mtu_is_the_smallest_of_the_matching_interfaces_that_are_up() -> None:
    links = {
        "eth0": LinkState(2, True, 1500),
        "ens5": LinkState(3, True, 9001),
        "eth1": LinkState(4, False, 1200),  # down: not counted
        "cali1234": LinkState(5, True, 1000),  # not matched
        "vxlan.calico": LinkState(6, True, 1450),
    }
    assert host_mtu(links, PATTERN) == 1500
    assert host_mtu(links, "^ens") == 9001
    assert host_mtu(links, "^nothing$") == 1460  # Felix's fallback


def test_the_pod_mtu_is_the_smallest_enabled_encapsulations() -> None:
    assert pod_mtu(1500, Config()) == 1500
    assert pod_mtu(1500, Config(vxlan_enabled=True)) == 1450
    assert pod_mtu(1500, Config(vxlan_enabled=True, vxlan_enabled_v6=True)) == 1430
    assert pod_mtu(1500, Config(vxlan_enabled=True, vxlan_mtu=1400)) == 1400
    assert pod_mtu(1500, Config(vxlan_mtu=1000)) == 1500  # not enabled: not counted


def test_a_bad_pattern_is_refused_at_the_edge() -> None:
    with pytest.raises(ConfigError, match="MTUIfacePattern"):
        parse_config({"MTUIfacePattern": "eth("})


def test_written_when_it_changes_and_a_failure_fails_the_apply_only_when_required(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "calico" / "mtu"
    file = MtuFile(target)
    file.apply(1450, required=True)
    assert target.read_text() == "1450"
    target.write_text("by hand")
    file.apply(1450, required=True)  # unchanged: not written again
    assert target.read_text() == "by hand"
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    unwritable = MtuFile(blocked / "mtu")
    with pytest.raises(ProgrammingError, match="RequireMTUFile"):
        unwritable.apply(1450, required=True)
    with caplog.at_level(logging.ERROR):
        unwritable.apply(1450, required=False)
        unwritable.apply(1450, required=False)
    assert len([r for r in caplog.records if "MTU file" in r.getMessage()]) == 1
