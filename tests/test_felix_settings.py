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
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
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
from dataplane.wire.refused_fields import RefusedFields

ADDRESS = "10.1.2.3"  # a DeviceRouteSourceAddress, which the driver refuses
WHY = "workload routes are written without a preferred source address"


def test_a_value_that_matters_is_refused_and_defaults_say_nothing() -> None:
    raw = {
        "deviceroutesourceaddress": ADDRESS,  # Felix's loader takes any case; so do we
        "NetlinkTimeoutSecs": "20",
        "ServiceLoopPrevention": "Disabled",  # what the driver does
        "ClusterType": "k8s,bgp,kdd",  # only OpenStack's would matter
        "XDPEnabled": "true",  # XDP is not this platform's
        "BPFMapSizeRoute": "1000",  # nor the eBPF dataplane's tuning
        "IptablesBackend": "nft",  # honoured, not refused
    }
    refused = parse_config(raw).refused
    assert [(r.key, r.value) for r in refused] == [
        ("DeviceRouteSourceAddress", ADDRESS),
        ("NetlinkTimeoutSecs", "20"),
    ]
    assert refused[0].line() == (f"config[DeviceRouteSourceAddress]='{ADDRESS}' refused: {WHY}")
    assert [r.key for r in refused_settings({"ClusterType": "k8s,openstack"})] == ["ClusterType"]
    assert [r.key for r in refused_settings({"BPFEnabled": "true"})] == ["BPFEnabled"]
    assert refused_settings({"BPFEnabled": "false", "WireguardEnabled": "False"}) == ()


def test_a_later_update_keeps_what_it_does_not_send_and_clears_what_it_sets_back() -> None:
    first = parse_config({"DeviceRouteSourceAddress": ADDRESS, "FloatingIPs": "Enabled"})
    later = parse_config({"FloatingIPs": "Disabled"}, first)
    assert [r.key for r in later.refused] == ["DeviceRouteSourceAddress"]


@given(st.sampled_from(sorted(k for k, v in SETTINGS.items() if isinstance(v, Refused))))
def test_felix_default_of_every_refused_key_says_nothing(key: str) -> None:
    # Unless the driver behaves as Felix with another value: that one says nothing.
    entry = SETTINGS[key]
    assert isinstance(entry, Refused)
    same = entry.default if entry.behaves_as is None else entry.behaves_as
    assert refused_settings({key: same}) == ()
    assert refused_settings({key: f"  {same.upper()} "}) == ()
    if entry.behaves_as is not None:
        assert [r.key for r in refused_settings({key: entry.default})] == [key]


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
            dp.send_message(_config(DeviceRouteSourceAddress=ADDRESS))
            dp.send_message(pb.InSync())
            await trio.testing.wait_all_tasks_blocked()
            assert settings() == {
                "DeviceRouteSourceAddress": (
                    "error",
                    f"DeviceRouteSourceAddress='{ADDRESS}' refused: {WHY}",
                )
            }
            assert observer.health.readiness().ok  # programmed as with the default
            # Sent again (Felix resends its whole config): nothing new said.
            dp.send_message(_config(DeviceRouteSourceAddress=ADDRESS, LogSeverityScreen="Info"))
            await trio.testing.wait_all_tasks_blocked()
            # Set back to Felix's default: the record goes.
            dp.send_message(_config(DeviceRouteSourceAddress=""))
            await trio.testing.wait_all_tasks_blocked()
            assert settings() == {}
            dp.close_input()

    with caplog.at_level(logging.WARNING, logger="dataplane"):
        trio.run(main)
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refused == [f"seq=1 config[DeviceRouteSourceAddress]='{ADDRESS}' refused: {WHY}"]


def test_show_lists_a_refused_setting_with_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "refused.log"
    write_log(log, [_config(NetlinkTimeoutSecs="20"), pb.InSync()])
    assert cli.main(["show", "--log", str(log), "--json"], {}) == 0
    shown = json.loads(capsys.readouterr().out)
    settings = [o for o in shown["objects"] if o["kind"] == "setting"]
    assert [(o["id"], o["status"]) for o in settings] == [("NetlinkTimeoutSecs", "error")]
    assert "netlink requests are not given a timeout of their own" in settings[0]["error"]


def test_a_refused_field_is_one_warning_and_a_field_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A pod in Istio's ambient mesh: Felix sends is_istio_ambient, which the
    # driver does not implement. Said once, however many pods carry it.
    observer = Observer(SimPlatform(), metrics=Metrics(process=False))
    dp = Dataplane(observer.platform, observer=observer)

    def pod(name: str, ambient: bool = False) -> pb.WorkloadEndpointUpdate:
        update = pb.WorkloadEndpointUpdate(
            id=pb.WorkloadEndpointID(
                orchestrator_id="k8s", workload_id=f"ns/{name}", endpoint_id="eth0"
            ),
            endpoint=pb.WorkloadEndpoint(state="active", name=f"cali{name}", ipv4_nets=[]),
        )
        update.endpoint.is_istio_ambient = ambient
        return update

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            dp.send_message(_config())
            dp.send_message(pod("a"))  # no QoS: nothing said
            dp.send_message(pod("b", ambient=True))
            dp.send_message(pod("c", ambient=True))
            dp.send_message(pb.InSync())
            await trio.testing.wait_all_tasks_blocked()
            records = observer.snapshot().records
            field = records[("field", "workload_endpoint_update.endpoint.is_istio_ambient")]
            assert field.status == "error"
            assert "not implemented" in (field.error or "")
            assert records[("workload_endpoint", "k8s/ns/b/eth0")].status == "done"
            dp.close_input()

    with caplog.at_level(logging.WARNING, logger="dataplane"):
        trio.run(main)
    said = [r.getMessage() for r in caplog.records if "ambient" in r.getMessage()]
    assert said == [
        "seq=3 workload_endpoint_update.endpoint.is_istio_ambient refused: Istio ambient mode"
        " is not implemented (logged once; messages carrying it are programmed without it)"
    ]


def _set(message: Message, path: list[str]) -> None:
    """Give the field at ``path`` a value (any will do: only presence is judged)."""
    *parents, leaf = path
    for name in parents:
        message = getattr(message, name)
    field = message.DESCRIPTOR.fields_by_name[leaf]
    value = getattr(message, leaf)
    if field.is_repeated:
        if field.message_type is not None:
            value.add()
        else:
            value.append("x" if field.type == FieldDescriptor.TYPE_STRING else 1)
    elif field.message_type is not None:
        value.SetInParent()
    elif field.type == FieldDescriptor.TYPE_STRING:
        setattr(message, leaf, "x")
    elif field.type == FieldDescriptor.TYPE_BOOL:
        setattr(message, leaf, True)
    else:
        setattr(message, leaf, 1)


def test_every_refused_field_of_the_table_is_found_where_felix_puts_it() -> None:
    refused = RefusedFields()
    found = set()
    for payload in pb.ToDataplane.DESCRIPTOR.oneofs_by_name["payload"].fields:
        kind = payload.name
        empty = getattr(pb.ToDataplane(), kind)
        assert refused.carried(kind, empty) == []  # an empty payload carries nothing
        for leaves in refused._checks.get(kind, ()):
            for name, _mode, path, entry in leaves.leaves:
                message = getattr(pb.ToDataplane(), kind).__class__()
                _set(message, [*leaves.parents, name])
                if entry.harmless is None:
                    assert [p for p, _ in refused.carried(kind, message)] == [path]
                    found.add(path)
    assert "workload_endpoint_update.endpoint.is_istio_ambient" in found
    assert not any(".qos_" in path for path in found)
    assert "global_bgp_config_update.service_cluster_cidrs" in found
    # A pool's allowed uses matter only when workloads are not among them.
    pool = pb.IPAMPoolUpdate(id="p", pool=pb.IPAMPool(cidr="10.65.0.0/16"))
    assert refused.carried("ipam_pool_update", pool) == []
    pool.pool.allowed_uses.extend(["Workload", "Tunnel"])
    assert refused.carried("ipam_pool_update", pool) == []
    del pool.pool.allowed_uses[:]
    pool.pool.allowed_uses.append("LoadBalancer")
    assert [p for p, _ in refused.carried("ipam_pool_update", pool)] == [
        "ipam_pool_update.pool.allowed_uses"
    ]
