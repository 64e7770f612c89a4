"""Run saved inputs through a target without atheris, with full tracebacks.

::

    python -m fuzz.replay NAME PATH...

Each PATH is an input file (a crash reproducer from ``fuzz/findings/``) or a
directory of them (a corpus). Exit 1 if any input fails, else 0. Useful to
debug a finding under pdb, and to check seeds; coverage plays no part.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

__all__ = ["main", "replay"]


def _inputs(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        out += sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    return out


def replay(name: str, paths: list[Path], *, quiet: bool = False) -> int:
    """Run every input; the number that failed (each reported on stderr)."""
    from fuzz.targets import TARGETS  # noqa: PLC0415 - imports dataplane

    target = TARGETS[name]
    failed = 0
    for path in _inputs(paths):
        try:
            target.test_one_input(path.read_bytes())
        except Exception:
            failed += 1
            print(f"{name}: {path}: FAILED", file=sys.stderr)
            traceback.print_exc()
        else:
            if not quiet:
                print(f"{name}: {path}: ok")
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz.replay", description=__doc__)
    parser.add_argument("target", choices=("frames", "envelopes", "managers"))
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("-q", "--quiet", action="store_true", help="report failures only")
    args = parser.parse_args(argv)
    return 1 if replay(args.target, args.paths, quiet=args.quiet) else 0


if __name__ == "__main__":
    sys.exit(main())
