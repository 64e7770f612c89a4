"""``make upstream``: build the pinned upstream binaries (see the package docstring).

Prints ``NAME PATH`` per binary built or cached. A module the Go module
proxy refuses is one line per binary on stderr and not a failure (the tests
that need it skip with the same words); any other build failure exits 1.
"""

from __future__ import annotations

import sys
import time

from testbed.upstream import UnavailableError, build


def main() -> int:
    started = time.monotonic()
    try:
        outcomes = list(build())
    except UnavailableError as exc:
        print(f"upstream: nothing built: {exc}", file=sys.stderr)
        return 0
    status = 0
    for outcome in outcomes:
        for name, path in outcome.built.items():
            print(f"{name} {path}")
        if outcome.failed is not None:
            for b in outcome.module.binaries:
                print(f"{b.name}: not built: {outcome.failed}", file=sys.stderr)
            if not outcome.refused:
                status = 1
    print(f"upstream: done in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
