"""``make upstream``: build the upstream binaries (see the package docstring).

Prints ``NAME PATH`` per binary built or cached. A module the Go module
proxy refuses is one line per binary on stderr and not a failure (the tests
that need it skip with the same words); any other build failure exits 1.
``--all-releases`` (``make test-releases``) builds every Calico archive,
not only the pinned release and the newest.
"""

from __future__ import annotations

import argparse
import sys
import time

from testbed.upstream import UnavailableError, build, calico_releases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.upstream", description=__doc__)
    parser.add_argument("--all-releases", action="store_true", help="every Calico archive")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        outcomes = []
        for outcome in build(releases=calico_releases(every=args.all_releases)):
            outcomes.append(outcome)
            took = time.monotonic() - started
            print(f"upstream: {outcome.name} ready at {took:.0f} s", file=sys.stderr)
    except UnavailableError as exc:
        print(f"upstream: nothing built: {exc}", file=sys.stderr)
        return 0
    status = 0
    for outcome in outcomes:
        for name, path in outcome.built.items():
            print(f"{name} {path}")
        if outcome.failed is not None:
            for name in outcome.binaries:
                print(f"{name}: not built: {outcome.failed}", file=sys.stderr)
            if not outcome.refused:
                status = 1
    print(f"upstream: done in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
