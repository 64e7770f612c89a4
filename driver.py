#!/usr/bin/env python3
"""dataplane driver: run as Felix's external dataplane driver, or replay logs.

See ``driver.py --help``.
"""

from dataplane.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
