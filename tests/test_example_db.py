"""The committed example database is there, and filed under our names."""

from __future__ import annotations

from hypothesis.database import InMemoryExampleDatabase

from tests.example_db import NamedExamples, committed_examples

# Every property that replays tests/examples/ (see tests/linux/test_render_kernel.py).
NAMES = ("render-kernel-legacy", "render-kernel-nft", "hostile-names")


def test_every_property_has_committed_examples() -> None:
    for name in NAMES:
        # The key Hypothesis asks with is its digest of the test's source;
        # whatever it is, the same examples come back.
        assert len(list(committed_examples(name).fetch(b"\x01digest.pareto"))) >= 10, name


def test_committed_examples_are_read_only_by_default() -> None:
    db = committed_examples(NAMES[0])
    before = sorted(db.fetch(b"k.pareto"))
    db.save(b"k.pareto", b"new example")
    db.delete(b"k.pareto", before[0])
    assert sorted(db.fetch(b"k.pareto")) == before


def test_named_examples_keep_hypothesis_sub_keys_apart() -> None:
    inner = InMemoryExampleDatabase()
    db = NamedExamples(inner, "t")
    db.save(b"digest-one", b"failure")
    db.save(b"digest-two.pareto", b"big")
    db.save(b"digest-two.secondary", b"spare")
    assert list(db.fetch(b"any")) == [b"failure"]
    assert list(inner.fetch(b"t.pareto")) == [b"big"]
    db.move(b"x.secondary", b"x", b"spare")
    assert sorted(db.fetch(b"y")) == [b"failure", b"spare"]
