"""What ``go build`` said, in one line: a proxy refusal, or the first error.

Shared by both builders of :mod:`testbed.upstream` (the Go modules of ours
and Calico's archives), whose failures a test gives as its skip reason.
"""

from __future__ import annotations

import re

__all__ = ["why_failed"]

_REFUSAL = re.compile(r"(\S+@\S+): reading (\S+): (4\d\d [A-Za-z ]+)")


def why_failed(stderr: str) -> tuple[bool, str]:
    """(refused by the proxy?, the one line that says why) from go's stderr."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        match = _REFUSAL.search(line)
        if match:
            said = ""
            if i + 1 < len(lines) and "server response:" in lines[i + 1]:
                said = " (" + lines[i + 1].strip() + ")"
            module, _url, status = match.groups()
            return True, f"the Go module proxy refused {module}: {status}{said}"
    # go prints "# package" before that package's compile errors: skip it.
    errors = [
        line for line in lines if line.strip() and not line.startswith(("go: downloading", "#"))
    ]
    return False, (errors[0].strip() if errors else "go build failed with no message")
