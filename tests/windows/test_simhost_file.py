"""The simulated host's file is shared between processes as a real host is.

A CNI stand-in in another process (``testbed.cni``) adds and removes pods'
endpoints while a host in this process holds the same file: each sees the
other's changes at its next call, nobody's write is lost, the file keeps
its inode, and the lock is held for the whole of every call.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dataplane.windows.hns.hcn import HcnError
from dataplane.windows.sim.simhost import SimHost
from dataplane.windows.sim.simhost_file import HostFile, read_host_file
from testbed.hns import NETWORK_ID, calico_host
from tests.kernel import scenario as sc

ACL = {
    "Type": "ACL",
    "Settings": {"Action": "Allow", "Direction": "In", "Priority": 100, "RuleType": "Switch"},
}


def _cni(path: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "testbed.cni", str(path), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def _names(host: SimHost) -> set[str]:
    return {str(ep["Name"]) for ep in host.list_endpoints()}


def test_another_process_adds_and_removes_endpoints_while_the_host_is_in_use(
    tmp_path: Path,
) -> None:
    path = tmp_path / "host.json"
    host = calico_host(sc.PODS[:1], path=path)
    inode = path.stat().st_ino
    assert "prod_late_eth0" not in _names(host)

    added = _cni(path, "add", "prod", "late", "77")
    assert "prod_late_eth0" in _names(host)  # seen at the next call
    # Our own write after theirs keeps theirs: the change is read first.
    update = {"ResourceType": "Policy", "RequestType": "Update", "Settings": {"Policies": [ACL]}}
    host.modify_endpoint(added, update)
    saved = {ep["ID"]: ep for ep in read_host_file(path)["Endpoints"]}
    assert saved[added]["Policies"][0]["Settings"]["Priority"] == 100

    assert _cni(path, "remove", "prod", "late") == added
    assert "prod_late_eth0" not in _names(host)
    assert path.stat().st_ino == inode  # rewritten in place, never renamed over
    assert [p.name for p in tmp_path.iterdir()] == ["host.json"]


def test_the_file_lock_is_held_for_the_whole_of_every_call(tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    host = calico_host(sc.PODS[:1], path=path)
    seen: list[int] = []

    def fault(call: str, target: str) -> bool:
        # Inside the call: another open of the file cannot take the lock.
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            seen.append(exc.errno or 0)
        else:
            seen.append(0)
        finally:
            os.close(fd)
        return False

    host.fault = fault
    host.list_endpoints()
    assert seen and set(seen) == {errno.EWOULDBLOCK}


def test_a_change_that_keeps_the_size_is_still_seen(tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    writer, reader = HostFile(path), HostFile(path)
    with writer.locked():
        writer.write({"Calls": {"A": 1}})
    with reader.locked() as first:
        assert first == {"Calls": {"A": 1}}
    with reader.locked() as again:
        assert again is None  # nothing changed: not re-read
    # Same length, written at once: the modification time tells (the writer
    # moves it on itself where the kernel's clock is too coarse to).
    with writer.locked():
        writer.write({"Calls": {"B": 2}})
    with reader.locked() as changed:
        assert changed == {"Calls": {"B": 2}}


def test_a_missing_or_broken_file_is_an_error_not_an_empty_host(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        SimHost.load(tmp_path / "missing.json")
    bad = tmp_path / "host.json"
    bad.write_text(json.dumps([1]))
    with pytest.raises(ValueError, match=r"host\.json: the top level is not a JSON object"):
        SimHost.load(bad)


# One step against the shared file: (operation, endpoint slot, a value).
_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove", "modify", "modify-missing", "tamper", "other"]),
        st.integers(0, 3),
        st.integers(1, 9),
    ),
    max_size=12,
)


def _held(host: SimHost) -> dict[str, list[dict[str, object]]]:
    return {
        "Networks": list(host.stored("Network").values()),
        "Endpoints": list(host.stored("Endpoint").values()),
        "LoadBalancers": list(host.stored("LoadBalancer").values()),
    }


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=_STEPS)
@example(steps=[("add", 1, 1), ("remove", 1, 1), ("add", 1, 2)])  # an id used again
def test_the_file_holds_what_the_host_holds_after_every_call(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, int]]
) -> None:
    """A write encodes again only what its call touched: the file must still
    equal the host after creates, deletes, an id used again, a refused call,
    and another process's change (which the next call reads first)."""
    path = tmp_path_factory.mktemp("host") / "host.json"
    host = calico_host([], path=path)
    other = SimHost.load(path)
    ids = [f"E0000000-0000-4000-8000-00000000000{slot}" for slot in range(4)]
    for op, slot, value in steps:
        endpoint_id = ids[slot]
        present = endpoint_id in host.stored("Endpoint")
        if op == "add" and not present:
            address = f"10.65.{slot}.{value}"
            body = {
                "ID": endpoint_id,
                "Name": f"pod-{value}",
                "IpConfigurations": [{"IpAddress": address}],
            }
            host.add_local_endpoint(NETWORK_ID, body)
        elif op == "remove" and present:
            host.remove_local_endpoint(endpoint_id)
        elif op == "modify" and present:
            settings_ = cast("dict[str, Any]", ACL["Settings"])
            acl = {**ACL, "Settings": {**settings_, "Priority": 100 + value}}
            host.modify_endpoint(endpoint_id, _update(acl))
        elif op == "modify-missing" and not present:
            with pytest.raises(HcnError):
                host.modify_endpoint(endpoint_id, _update(ACL))
        elif op == "tamper" and present:
            # Another process changes an object behind this one's back.
            found = other.stored("Endpoint")[endpoint_id]
            found["Name"] = f"tampered-{value}"
            other.flush()
        elif op == "other":
            other.version()  # a call of the other process's: its counts saved at flush
            other.flush()
        saved = read_host_file(path)
        assert {k: saved[k] for k in ("Networks", "Endpoints", "LoadBalancers")} == _held(host)
        assert _held(SimHost.load(path)) == _held(host)


def _update(acl: Mapping[str, object]) -> dict[str, Any]:
    return {"ResourceType": "Policy", "RequestType": "Update", "Settings": {"Policies": [acl]}}
