"""The committed Hypothesis example database, filed under names we choose.

Hypothesis replays a test's saved examples before generating new ones: the
failures it once found and, where a test calls ``target()``, the examples
on the front of what it maximised (the biggest, most varied inputs seen).
It files them under a digest of the test's source, so any edit to a test
would orphan them without a word; :class:`NamedExamples` files them under
a fixed name per test instead, keeping Hypothesis's own sub-keys
(``.secondary``, ``.pareto``).

The directory is ``tests/examples/`` and is committed. Runs read it and
never change it; ``DP_RECORD_EXAMPLES=1`` lets a run add to it (and drop
what no longer replays), to be reviewed and committed like code.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase, ReadOnlyDatabase

__all__ = ["EXAMPLES_DIR", "NamedExamples", "committed_examples"]

EXAMPLES_DIR = Path(__file__).resolve().parent / "examples"
_SUB_KEYS = (b".secondary", b".pareto")


class NamedExamples(ExampleDatabase):
    """``inner``, with every key of one test mapped to ``name`` (and its sub-keys)."""

    def __init__(self, inner: ExampleDatabase, name: str) -> None:
        super().__init__()
        self._inner = inner
        self._name = name.encode()

    def __repr__(self) -> str:
        return f"NamedExamples({self._inner!r}, {self._name.decode()!r})"

    def _key(self, key: bytes) -> bytes:
        for sub in _SUB_KEYS:
            if key.endswith(sub):
                return self._name + sub
        return self._name

    def save(self, key: bytes, value: bytes) -> None:
        self._inner.save(self._key(key), value)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self._inner.fetch(self._key(key))

    def delete(self, key: bytes, value: bytes) -> None:
        self._inner.delete(self._key(key), value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self._inner.move(self._key(src), self._key(dest), value)


def recording() -> bool:
    return os.environ.get("DP_RECORD_EXAMPLES") == "1"


def committed_examples(name: str) -> ExampleDatabase:
    """The committed examples of the test called ``name``; writable only when recording."""
    directory: ExampleDatabase = DirectoryBasedExampleDatabase(EXAMPLES_DIR)
    if not recording():
        directory = ReadOnlyDatabase(directory)
    return NamedExamples(directory, name)
