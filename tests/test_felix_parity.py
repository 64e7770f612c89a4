"""The parity table against every Felix release's own source (../shared/upstream).

``docs/felix-parity.md`` is generated from each release's
``config_params.go`` and ``driver.go`` and from the driver's table
(``dataplane/felix_settings.py``). These tests fail when a release has a
key one of Felix's dataplanes reads that the driver's table does not name,
when the table names what no release has, when a refused key's default is
not Felix's, when a key the driver reads is neither refused nor honoured
by a test that exists, and when the document is stale.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dataplane.config import felix_keys
from dataplane.felix_fields import FIELDS
from dataplane.felix_settings import DRIVER_KEYS, SETTINGS, Honoured, Refused, disposition
from testbed.upstream.calico import ArchiveError
from testbed.upstream.felix_source import FelixSource, felix_sources
from tests.conftest import REPO


@pytest.fixture(scope="module")
def sources() -> tuple[FelixSource, ...]:
    try:
        return felix_sources()
    except ArchiveError as exc:  # a clone without ../shared: nothing to hold the table to
        pytest.skip(str(exc))


def _read_by_driver() -> set[str]:
    return {key for key, _field, _default in felix_keys()}


def test_every_key_a_felix_dataplane_reads_is_named(sources: tuple[FelixSource, ...]) -> None:
    ours = _read_by_driver()
    missing = [
        f"{s.label}: {key}"
        for s in sources
        for key in sorted(s.linux_reads | s.windows_reads)
        if key not in ours and disposition(key) is None
    ]
    assert not missing, (
        "Felix's dataplanes read these keys; say in dataplane/felix_settings.py what the"
        f" driver does with each: {missing}"
    )


def test_the_table_names_only_keys_felix_has(sources: tuple[FelixSource, ...]) -> None:
    every = set().union(*(s.settings for s in sources))
    assert sorted(set(SETTINGS) - every - DRIVER_KEYS) == []
    assert sorted(_read_by_driver() - every) == sorted(DRIVER_KEYS)


def test_a_refused_key_takes_felix_default_as_harmless(sources: tuple[FelixSource, ...]) -> None:
    wrong = []
    for key, entry in SETTINGS.items():
        if not isinstance(entry, Refused):
            continue
        for s in sources:
            setting = s.settings.get(key)
            if setting is None:
                continue
            if entry.refuses(setting.default) and entry.behaves_as is None:
                wrong.append(f"{s.label}: {key} default {setting.default!r}")
            if setting.default.lower() != entry.default.lower() and s is sources[-1]:
                wrong.append(f"{key}: table says {entry.default!r}, newest {setting.default!r}")
    assert not wrong


def _proof_problem(what: str, entry: Honoured) -> str | None:
    path, _, name = entry.proof.partition("::")
    source = REPO / path
    if source.exists() and re.search(
        rf"^(async )?def {re.escape(name)}\(", source.read_text(), re.MULTILINE
    ):
        return None
    return f"{what}: {entry.proof} does not exist"


def test_every_field_of_every_release_is_named(sources: tuple[FelixSource, ...]) -> None:
    missing = [
        f"{s.label}: {message}.{name}"
        for s in sources
        for message, names in s.messages.items()
        for name in names
        if name not in FIELDS.get(message, {})
    ]
    assert not missing, f"say in dataplane/felix_fields.py what the driver does with {missing}"
    every = {(m, n) for s in sources for m, names in s.messages.items() for n in names}
    named = {(m, n) for m, names in FIELDS.items() for n in names}
    assert sorted(named - every) == []  # nothing named that no release has


def test_every_honoured_field_names_a_test_that_exists() -> None:
    problems = [
        _proof_problem(f"{message}.{name}", entry)
        for message, names in FIELDS.items()
        for name, entry in names.items()
        if isinstance(entry, Honoured)
    ]
    assert [p for p in problems if p] == []


def test_every_key_the_driver_reads_is_honoured_with_a_test_that_exists() -> None:
    # Or refused: a few are parsed (a bad value is still an error) but not acted on.
    problems = []
    for key in sorted(_read_by_driver()):
        entry = SETTINGS.get(key)
        if isinstance(entry, Refused):
            continue
        if not isinstance(entry, Honoured):
            problems.append(f"{key}: read by the driver, neither Honoured nor Refused")
            continue
        problem = _proof_problem(key, entry)
        if problem:
            problems.append(problem)
    assert not problems


def test_the_document_is_what_the_sources_and_the_table_make(
    sources: tuple[FelixSource, ...],
) -> None:
    from testbed.upstream.parity import DOC, render  # noqa: PLC0415 (needs the sources)

    assert Path(DOC).read_text() == render(sources), (
        "docs/felix-parity.md is stale: python -m testbed.upstream.parity --write"
    )
