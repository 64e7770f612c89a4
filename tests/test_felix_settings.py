"""Felix settings the driver refuses: said once, shown by ``show``, never an error.

A key Felix's Linux dataplane acts on and this driver does not
(dataplane/felix_settings.py) is refused when it comes with a value that
matters: one WARNING naming the message, the key and the value; a
``setting`` record in error with the reason; the node programmed as with
Felix's default. Felix's default, a harmless value, or a key that belongs
to another part of Felix (BPF, XDP, WireGuard's tuning) says nothing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from dataplane import cli
from dataplane.config import parse_config
from dataplane.core.loop import Dataplane
from dataplane.felix_settings import SETTINGS, Refused, refused_settings
from dataplane.ops.metrics import Metrics
from dataplane.ops.observer import Observer
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.msglog import write_log

ADDRESS = "10.1.2.3"


def test_a_value_that_matters_is_refused_and_defaults_say_nothing() -> None:
    raw = {
        "natoutgoingaddress": ADDRESS,  # Felix's loader takes any case; so do we
        "WorkloadSourceSpoofing": "Any",
        "ServiceLoopPrevention": "Drop",  # Felix's default
        "ClusterType": "k8s,bgp,kdd",  # only OpenStack's would matter
        "XDPEnabled": "true",  # XDP is not this platform's
        "BPFMapSizeRoute": "1000",  # nor the eBPF dataplane's tuning
        "IptablesBackend": "nft",  # honoured, not refused
    }
    refused = parse_config(raw).refused
    assert [(r.key, r.value) for r in refused] == [
        ("NATOutgoingAddress", ADDRESS),
        ("WorkloadSourceSpoofing", "Any"),
    ]
    assert refused[0].line() == (
        f"config[NATOutgoingAddress]='{ADDRESS}' refused: NAT outgoing masquerades to the"
        " interface's address; a fixed SNAT address is not implemented"
    )
    assert [r.key for r in refused_settings({"ClusterType": "k8s,openstack"})] == ["ClusterType"]
    assert [r.key for r in refused_settings({"BPFEnabled": "true"})] == ["BPFEnabled"]
    assert refused_settings({"BPFEnabled": "false", "WireguardEnabled": "False"}) == ()


def test_a_later_update_keeps_what_it_does_not_send_and_clears_what_it_sets_back() -> None:
    first = parse_config({"NATOutgoingAddress": ADDRESS, "FloatingIPs": "Enabled"})
    later = parse_config({"FloatingIPs": "Disabled"}, first)
    assert [r.key for r in later.refused] == ["NATOutgoingAddress"]


@given(st.sampled_from(sorted(k for k, v in SETTINGS.items() if isinstance(v, Refused))))
def test_felix_default_of_every_refused_key_says_nothing(key: str) -> None:
    entry = SETTINGS[key]
    assert isinstance(entry, Refused)
    assert refused_settings({key: entry.default}) == ()
    assert refused_settings({key: f"  {entry.default.upper()} "}) == ()


def _config(**values: str) -> pb.ConfigUpdate:
    return pb.ConfigUpdate(config={"FelixHostname": "node-1", **values})


def test_a_refused_setting_is_one_warning_and_an_error_record_while_it_is_sent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    observer = Observer(SimPlatform(), metrics=Metrics(process=False))
    dp = Dataplane(observer.platform, observer=observer)

    def settings() -> dict[str, tuple[str, str | None]]:
        records = observer.snapshot().records.values()
        return {r.id: (r.status, r.error) for r in records if r.kind == "setting"}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            dp.send_message(_config(NATOutgoingAddress=ADDRESS))
            dp.send_message(pb.InSync())
            await trio.testing.wait_all_tasks_blocked()
            assert settings() == {
                "NATOutgoingAddress": (
                    "error",
                    f"NATOutgoingAddress='{ADDRESS}' refused: NAT outgoing masquerades to the"
                    " interface's address; a fixed SNAT address is not implemented",
                )
            }
            assert observer.health.readiness().ok  # programmed as with the default
            # Sent again (Felix resends its whole config): nothing new said.
            dp.send_message(_config(NATOutgoingAddress=ADDRESS, LogSeverityScreen="Info"))
            await trio.testing.wait_all_tasks_blocked()
            # Set back to Felix's default: the record goes.
            dp.send_message(_config(NATOutgoingAddress=""))
            await trio.testing.wait_all_tasks_blocked()
            assert settings() == {}
            dp.close_input()

    with caplog.at_level(logging.WARNING, logger="dataplane"):
        trio.run(main)
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refused == [
        f"seq=1 config[NATOutgoingAddress]='{ADDRESS}' refused: NAT outgoing masquerades to"
        " the interface's address; a fixed SNAT address is not implemented"
    ]


def test_show_lists_a_refused_setting_with_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "refused.log"
    write_log(log, [_config(WorkloadSourceSpoofing="Any"), pb.InSync()])
    assert cli.main(["show", "--log", str(log), "--json"], {}) == 0
    shown = json.loads(capsys.readouterr().out)
    settings = [o for o in shown["objects"] if o["kind"] == "setting"]
    assert [(o["id"], o["status"]) for o in settings] == [("WorkloadSourceSpoofing", "error")]
    assert "workloads may not send from addresses other than their own" in settings[0]["error"]
