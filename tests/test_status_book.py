"""Status reports from a StatusBook are the reports of a full comparison.

The reporter given a :class:`StatusBook` compares only the endpoints
written since its last look and those Felix sent since; on random
histories (statuses set and removed, endpoints recorded and removed, the
journal outgrowing the book) it sends what a reporter given a fresh copy
of every status each time sends.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.core import status_book
from dataplane.core.platform import EndpointKey
from dataplane.core.status import StatusReporter
from dataplane.core.status_book import StatusBook
from dataplane.model import EndpointStatus, HostEndpointKey, WorkloadEndpointKey
from dataplane.wire._pb import felixbackend_pb2 as pb

KEYS: list[EndpointKey] = [
    *(WorkloadEndpointKey("k8s", f"ns/pod{i}", "eth0") for i in range(4)),
    HostEndpointKey("eth0"),
    HostEndpointKey("eth1"),
]


def _record(key: WorkloadEndpointKey, name: str | None) -> Any:
    wid = pb.WorkloadEndpointID(
        orchestrator_id=key.orchestrator_id,
        workload_id=key.workload_id,
        endpoint_id=key.endpoint_id,
    )
    if name is None:
        return pb.WorkloadEndpointRemove(id=wid)
    return pb.WorkloadEndpointUpdate(id=wid, endpoint=pb.WorkloadEndpoint(name=name))


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from(KEYS), st.sampled_from(list(EndpointStatus))),
        st.tuples(st.just("remove"), st.sampled_from(KEYS)),
        st.tuples(
            st.just("record"),
            st.sampled_from(KEYS[:4]),
            st.none() | st.sampled_from(["cali1", "cali2"]),
        ),
        st.tuples(st.just("report")),
        st.tuples(st.just("report")),
    ),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(_ops)
def test_reports_from_the_book_are_those_of_a_full_comparison(ops: list[tuple[Any, ...]]) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(status_book, "_MIN_JOURNAL", 3)  # the journal outgrows the book often
        _compare(ops)


def _compare(ops: list[tuple[Any, ...]]) -> None:
    book = StatusBook()
    by_book, by_copy = StatusReporter(), StatusReporter()
    for op in [*ops, ("report",)]:
        if op[0] == "set":
            book.set(op[1], op[2])
        elif op[0] == "remove":
            book.remove(op[1])
        elif op[0] == "record":
            for reporter in (by_book, by_copy):
                reporter.record(_record(op[1], op[2]))
        else:
            sent = [m.SerializeToString(deterministic=True) for m in by_book.changes(book)]
            full = [m.SerializeToString(deterministic=True) for m in by_copy.changes(dict(book))]
            assert sorted(sent) == sorted(full)
            assert len(sent) == len(set(sent))  # each endpoint once


def test_a_reader_behind_the_dropped_journal_is_told_to_look_at_everything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(status_book, "_MIN_JOURNAL", 2)
    book = StatusBook()
    start = book.position
    book.set(KEYS[0], EndpointStatus.UP)
    middle = book.position
    book.set(KEYS[0], EndpointStatus.DOWN)
    book.set(KEYS[0], EndpointStatus.UP)  # two entries for one endpoint: dropped first
    assert book.changed_since(start) is None and book.changed_since(middle) is None
    now = book.position
    assert book.changed_since(now) == []
    book.set(KEYS[0], EndpointStatus.UP)  # no change, no entry
    book.remove(KEYS[1])  # not there, no entry
    assert book.changed_since(now) == []
    book.set(KEYS[1], EndpointStatus.DOWN)
    assert book.changed_since(now) == [KEYS[1]]
