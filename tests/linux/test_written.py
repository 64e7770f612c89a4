"""Writes: a read merged into a cache keeps every key a later write touched."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dataplane.linux.kernel.written import Writes

keys = st.sampled_from("abcdef")
states = st.dictionaries(keys, st.integers(0, 3))


@given(states, states, st.lists(st.lists(keys, max_size=3), max_size=4), st.integers(0, 4))
def test_a_read_takes_every_key_but_those_written_after_it_began(
    cache: dict[str, int], read: dict[str, int], writes: list[list[str]], began_at: int
) -> None:
    log: Writes[str] = Writes()
    began = 0
    for number, touched in enumerate(writes, start=1):
        log.wrote(touched)
        if number == began_at:
            began = log.count
    later = {k for n, touched in enumerate(writes, start=1) if n > began for k in touched}
    before = dict(cache)
    changed = log.merge(cache, read, began)
    for key in before.keys() | read.keys():
        want = before.get(key) if key in later else read.get(key)
        assert cache.get(key) == want
    assert changed == {k for k in before.keys() | read.keys() if before.get(k) != cache.get(k)}
    # Settled: a read that begins now takes everything.
    log.settled(log.count)
    log.merge(cache, read, log.count)
    assert cache == read
