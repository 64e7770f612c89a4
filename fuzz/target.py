"""The atheris entry point: one target, under libFuzzer.

::

    python -m fuzz.target NAME [libFuzzer options] [corpus dirs | input files]

``NAME`` is ``frames``, ``envelopes`` or ``managers``; the rest is libFuzzer's
command line (``-runs=N``, ``-max_total_time=S``, ``-max_len=N``,
``-artifact_prefix=DIR/``...; given files instead of directories, it runs
just those inputs). :mod:`fuzz.run` builds these command lines. Only
``dataplane.*`` is instrumented for coverage: the harnesses are imported
under ``atheris.instrument_imports``, which instruments what they import.
"""

from __future__ import annotations

import sys
from typing import Any

import atheris  # type: ignore[import-untyped]

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv if argv is None else argv)
    if len(args) < 2 or args[1].startswith("-"):
        sys.exit("usage: python -m fuzz.target frames|envelopes|managers [libFuzzer args]")
    name = args.pop(1)
    with atheris.instrument_imports(include=["dataplane"]):
        from fuzz.structured import StructuredMutator  # noqa: PLC0415 - instrumented import
        from fuzz.targets import TARGETS  # noqa: PLC0415
    target = TARGETS.get(name)
    if target is None:
        sys.exit(f"unknown target {name!r}: expected one of {', '.join(TARGETS)}")
    hooks: dict[str, Any] = {}
    if target.structured:
        mutator = StructuredMutator(lambda data, size: bytes(atheris.Mutate(data, size)))
        hooks = {"custom_mutator": mutator.mutate, "custom_crossover": mutator.crossover}
    atheris.Setup(args, target.test_one_input, **hooks)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
