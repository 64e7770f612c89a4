"""Coverage-guided fuzzing of the wire decoder, release detection and the managers.

One harness per target (``frames``, ``envelopes``, ``managers``), each a plain
``test_one_input(data: bytes) -> None`` that raises on a finding. Only
:mod:`fuzz.target` imports atheris; :mod:`fuzz.run` drives every target for a
bounded budget and :mod:`fuzz.replay` runs saved inputs without atheris.
See ``fuzz/README.md``.

Nothing here may import :mod:`dataplane` at package import time: the atheris
entry point imports the harnesses under ``atheris.instrument_imports`` so
that ``dataplane.*`` is instrumented, which only works for modules not yet
imported.
"""
