"""Endpoint statuses kept as things change equal statuses worked out afresh.

The Linux platform looks again only at endpoints touched since the last
apply, those on an interface whose link changed and those entering or
leaving ``error``. On random histories of endpoints (set, moved to another
interface, admin down, removed), links (added, deleted, up or down) and
refusals, the book after each update equals every status worked out from
scratch: a workload is up when active and its interface is up, a host
endpoint when its interface is (or it names none), anything held back is
``error``.
"""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from dataplane.core.platform import EndpointKey
from dataplane.linux.netlink.links import LinkMonitor, LinkState
from dataplane.linux.statuses import EndpointStatuses
from dataplane.linux.writers.hosts import HostEndpointWriter
from dataplane.linux.writers.workloads import WorkloadWriter
from dataplane.model import (
    EffectivePolicy,
    EndpointStatus,
    HostEffectivePolicy,
    HostEndpoint,
    HostEndpointKey,
    WorkloadEndpoint,
    WorkloadEndpointKey,
)

IFACES = ["cali1", "cali2", "eth0"]
WORKLOADS = [WorkloadEndpointKey("k8s", f"ns/pod{i}", "eth0") for i in range(3)]
HOSTS = [HostEndpointKey("eth0"), HostEndpointKey("all")]
KEYS: list[EndpointKey] = [*WORKLOADS, *HOSTS]


def _afresh(
    workloads: WorkloadWriter,
    hosts: HostEndpointWriter,
    links: dict[str, LinkState],
    failing: set[EndpointKey],
) -> dict[EndpointKey, EndpointStatus]:
    """Every status worked out from scratch, as each apply did before."""
    out: dict[EndpointKey, EndpointStatus] = {}
    for key, wep in workloads:
        link = links.get(wep.name)
        up = wep.admin_up and link is not None and link.up
        out[key] = EndpointStatus.UP if up else EndpointStatus.DOWN
    for hkey, hep in hosts:
        link = links.get(hep.name)
        up = not hep.name or (link is not None and link.up)
        out[hkey] = EndpointStatus.UP if up else EndpointStatus.DOWN
    for bad in failing & out.keys():
        out[bad] = EndpointStatus.ERROR
    return out


class Links(LinkMonitor):
    """Links changed by hand, as notifications change them (a new LinkState each time)."""

    def __init__(self) -> None:
        super().__init__(lambda: None)
        self._stale = False
        self.next_index = 1

    def toggle(self, name: str, up: bool) -> None:
        if name in self.links and self.links[name].up == up:
            del self.links[name]
        else:
            self.next_index += 1
            self.links[name] = LinkState(self.next_index, up)
        self.generation += 1


_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("workload"),
            st.sampled_from(WORKLOADS),
            st.sampled_from(IFACES[:2]),
            st.sampled_from(["active", "inactive"]),
        ),
        st.tuples(st.just("host"), st.sampled_from(HOSTS)),
        st.tuples(st.just("remove"), st.sampled_from(KEYS)),
        st.tuples(st.just("link"), st.sampled_from(IFACES), st.booleans()),
        st.tuples(st.just("fail"), st.sampled_from(KEYS)),
        st.tuples(st.just("apply")),
        st.tuples(st.just("apply")),
    ),
    max_size=50,
)


@settings(max_examples=400, deadline=None)
@given(_ops)
@example([("workload", WORKLOADS[0], "cali1", "active"), ("apply",), ("link", "cali1", True)])
@example([("host", HOSTS[0]), ("apply",), ("fail", HOSTS[0]), ("apply",), ("fail", HOSTS[0])])
def test_statuses_kept_as_things_change_equal_statuses_worked_out_afresh(
    ops: list[tuple[Any, ...]],
) -> None:
    workloads, hosts, links = WorkloadWriter(), HostEndpointWriter(), Links()
    statuses = EndpointStatuses(links)
    failing: set[EndpointKey] = set()
    for op in [*ops, ("apply",)]:
        if op[0] == "workload":
            _, key, iface, state = op
            workloads.set(WorkloadEndpoint(key, iface, state=state), EffectivePolicy())
            statuses.touch(key)
        elif op[0] == "host":
            key = op[1]
            name = "" if key.endpoint_id == "all" else key.endpoint_id
            hosts.set(HostEndpoint(key, name), HostEffectivePolicy())
            statuses.touch(key)
        elif op[0] == "remove":
            key = op[1]
            if isinstance(key, HostEndpointKey):
                hosts.remove(key)
            else:
                workloads.remove(key)
            statuses.touch(key)
        elif op[0] == "link":
            links.toggle(op[1], op[2])
        elif op[0] == "fail":
            failing ^= {op[1]}
        else:
            book = statuses.update(workloads, hosts, failing)
            assert dict(book) == _afresh(workloads, hosts, links.links, failing)
