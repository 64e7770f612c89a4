"""``python -m dataplane``: the same command line as ``dataplane-driver``."""

from dataplane.cli import main

raise SystemExit(main())
