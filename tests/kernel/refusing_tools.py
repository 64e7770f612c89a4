"""A PATH whose iptables restore tools refuse one marker: "an object the kernel refuses".

Each ``*tables-*-restore`` wrapper refuses any rule line that mentions the
marker, in the kernel tool's own error format (so the driver's blame
finds the line), and hands everything else to the real tool. Shared by
the quarantine tests and the reliability benchmark.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

__all__ = ["refusing_env"]

_TOOLS = (
    "iptables-nft-restore",
    "ip6tables-nft-restore",
    "iptables-legacy-restore",
    "ip6tables-legacy-restore",
)

_WRAPPER = """#!{python}
import subprocess, sys
data = sys.stdin.buffer.read()
for number, line in enumerate(data.decode(errors="replace").splitlines(), start=1):
    if line.startswith(("-A ", "-I ")) and "{marker}" in line:
        sys.stderr.write("{tool}: refused by the test hook\\n")
        sys.stderr.write("Error occurred at line: %d\\n" % number)
        sys.exit(2)
sys.exit(subprocess.run(["{real}", *sys.argv[1:]], input=data).returncode)
"""


def refusing_env(directory: Path, marker: str) -> dict[str, str]:
    """Write the wrappers into ``directory``; an environment that finds them first."""
    for tool in _TOOLS:
        real = shutil.which(tool)
        if real is None:
            raise FileNotFoundError(tool)
        wrapper = directory / tool
        wrapper.write_text(
            _WRAPPER.format(python=sys.executable, marker=marker, tool=tool, real=real)
        )
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ)
    env["PATH"] = f"{directory}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    return env
