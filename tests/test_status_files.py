"""The driver's endpoint-status files against Felix's reporter (the fake, not external)."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.config import parse_config
from dataplane.core.status_files import StatusFileSink
from dataplane.errors import ConfigError
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.conftest import run_trio
from tests.felix_status_reporter import FakeFelixStatusFiles


class Sent:
    """The pipe to Felix: keeps what went out."""

    def __init__(self) -> None:
        self.envelopes: list[pb.FromDataplane] = []

    async def send(self, envelope: pb.FromDataplane) -> None:
        self.envelopes.append(envelope)


_WIDS = [
    pb.WorkloadEndpointID(orchestrator_id="k8s", workload_id=w, endpoint_id="eth0")
    for w in ("prod/a", "prod/b b", "ns/c%", "x/ü")
]


def _update(i: int, status: str, address: int, with_endpoint: bool) -> pb.FromDataplane:
    update = pb.WorkloadEndpointStatusUpdate(id=_WIDS[i], status=pb.EndpointStatus(status=status))
    if with_endpoint:
        update.endpoint.CopyFrom(
            pb.WorkloadEndpoint(name=f"cali{i}", ipv4_nets=[f"10.65.0.{address}/32"])
        )
    return pb.FromDataplane(workload_endpoint_status_update=update)


_envelopes = st.one_of(
    st.builds(
        _update,
        st.integers(0, len(_WIDS) - 1),
        st.sampled_from(["up", "down", "error"]),
        st.integers(1, 3),
        st.booleans(),
    ),
    st.builds(
        lambda i: pb.FromDataplane(
            workload_endpoint_status_remove=pb.WorkloadEndpointStatusRemove(id=_WIDS[i])
        ),
        st.integers(0, len(_WIDS) - 1),
    ),
    st.just(pb.FromDataplane(dataplane_in_sync=pb.DataplaneInSync())),
    st.just(pb.FromDataplane(process_status_update=pb.ProcessStatusUpdate(uptime=1))),
)


@settings(max_examples=150, deadline=None)
@given(before=st.lists(_envelopes, max_size=12), after=st.lists(_envelopes, max_size=12))
def test_the_directory_is_what_felix_s_reporter_would_make_it(
    before: list[pb.FromDataplane], after: list[pb.FromDataplane]
) -> None:
    """After every envelope, from our DataplaneInSync on; untouched before it."""
    stream = [*before, pb.FromDataplane(dataplane_in_sync=pb.DataplaneInSync()), *after]
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp)
        oracle_dir = prefix / "oracle"
        oracle = FakeFelixStatusFiles(oracle_dir, external=False)
        ours = prefix / "endpoint-status"
        ours.mkdir()
        (ours / "k8s stale eth0").write_bytes(b"{}")  # left by an earlier run
        sink = StatusFileSink(Sent(), lambda: str(prefix))

        async def main() -> None:
            synced = False
            for envelope in stream:
                await sink.send(envelope)
                oracle.feed(envelope)
                synced = synced or envelope.HasField("dataplane_in_sync")
                if not synced:
                    assert [p.name for p in ours.iterdir()] == ["k8s stale eth0"]
                else:
                    assert _files(ours) == oracle.files()

        run_trio(main)
        assert sink.inner.envelopes == stream  # type: ignore[attr-defined]


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _in_sync_with_one_pod() -> list[pb.FromDataplane]:
    return [
        _update(0, "up", 1, True),
        pb.FromDataplane(dataplane_in_sync=pb.DataplaneInSync()),
    ]


def test_an_empty_prefix_writes_nothing(tmp_path: Path) -> None:
    sink = StatusFileSink(Sent(), lambda: "")

    async def main() -> None:
        for envelope in _in_sync_with_one_pod():
            await sink.send(envelope)

    run_trio(main)
    assert list(tmp_path.iterdir()) == [] and sink.writes == 0


def test_a_directory_that_cannot_be_written_is_one_warning_then_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "endpoint-status"
    blocker.write_text("a file where the directory should be")
    sink = StatusFileSink(Sent(), lambda: str(tmp_path))
    heartbeat = pb.FromDataplane(process_status_update=pb.ProcessStatusUpdate(uptime=1))

    async def main() -> None:
        with caplog.at_level(logging.WARNING, logger="dataplane.core.status_files"):
            for envelope in [*_in_sync_with_one_pod(), heartbeat, heartbeat]:
                await sink.send(envelope)
        assert len(caplog.records) == 1
        assert "not written" in caplog.records[0].getMessage()
        blocker.unlink()
        await sink.send(heartbeat)  # the next envelope retries the whole directory

    run_trio(main)
    assert [p.name for p in blocker.iterdir()] == ["k8s prod%2Fa eth0"]
    assert sink.writes == 1


def test_the_prefix_is_felix_s_config_key_and_must_be_absolute() -> None:
    assert parse_config({}).endpoint_status_path_prefix == "/var/run/calico"
    assert parse_config({"EndpointStatusPathPrefix": ""}).endpoint_status_path_prefix == ""
    assert parse_config({"EndpointStatusPathPrefix": "/run/x"}).endpoint_status_path_prefix == (
        "/run/x"
    )
    with pytest.raises(ConfigError, match=r"EndpointStatusPathPrefix.*absolute path"):
        parse_config({"EndpointStatusPathPrefix": "run/x"})


def test_the_first_sync_writes_every_file_in_one_pass(tmp_path: Path) -> None:
    """2,000 pods at the first DataplaneInSync: all written, in one pass off the loop."""
    sink = StatusFileSink(Sent(), lambda: str(tmp_path))
    stream = [
        pb.FromDataplane(
            workload_endpoint_status_update=pb.WorkloadEndpointStatusUpdate(
                id=pb.WorkloadEndpointID(
                    orchestrator_id="k8s", workload_id=f"ns/p{i}", endpoint_id="eth0"
                ),
                status=pb.EndpointStatus(status="up"),
                endpoint=pb.WorkloadEndpoint(name=f"cali{i}"),
            )
        )
        for i in range(2000)
    ]
    stream.append(pb.FromDataplane(dataplane_in_sync=pb.DataplaneInSync()))

    async def main() -> None:
        for envelope in stream:
            await sink.send(envelope)

    trio.run(main)
    assert len(list((tmp_path / "endpoint-status").iterdir())) == 2000
    assert sink.writes == 1
