#!/usr/bin/env python3
"""dataplane driver: run as Felix's external dataplane driver, or replay logs.

The same command line as the ``dataplane-driver`` console script (the path
to give Felix) and ``python -m dataplane``; see ``driver.py --help``.
"""

from dataplane.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
