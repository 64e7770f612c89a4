"""A PATH whose rule tools refuse one marker: "an object the kernel refuses".

Each ``*tables-*-restore`` wrapper refuses any rule line that mentions the
marker, and so does the ``nft`` wrapper for any ``add rule`` line of a
script (``nft -f``), each in the real tool's own error format (so the
driver's blame finds the line); everything else goes to the real tool.
Shared by the quarantine tests and the reliability benchmark.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.kernel import scenario

__all__ = ["MARKER", "REFUSED", "refused_policy", "refusing_env", "using_refused_policy"]

# The port the wrappers refuse (given to refusing_env), and the policy that
# uses it: exactly "an object the kernel refuses".
MARKER = "7777"
REFUSED = pb.PolicyID(name="refuse-me")


def refused_policy(port: int = int(MARKER)) -> pb.ActivePolicyUpdate:
    """The policy, allowing TCP to ``port``: refused at MARKER, accepted at any other."""
    return pb.ActivePolicyUpdate(
        id=REFUSED,
        policy=pb.Policy(
            tier="default",
            inbound_rules=[
                pb.Rule(
                    action="allow",
                    protocol=pb.Protocol(name="tcp"),
                    dst_ports=[pb.PortRange(first=port, last=port)],
                )
            ],
        ),
    )


def using_refused_policy(iface: str) -> pb.WorkloadEndpointUpdate:
    """db-1 on ``iface``, with the refused policy first in its default tier."""
    update = scenario.endpoint(scenario.pod("db-1"), iface)
    update.endpoint.tiers[1].ingress_policies.insert(0, REFUSED)
    return update


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


_NFT_WRAPPER = """#!{python}
import subprocess, sys
args = sys.argv[1:]
data = sys.stdin.buffer.read() if "-f" in args else None
for number, line in enumerate((data or b"").decode(errors="replace").splitlines(), start=1):
    if line.startswith("add rule ") and "{marker}" in line:
        sys.stderr.write("/dev/stdin:%d:1-8: Error: refused by the test hook\\n" % number)
        sys.exit(1)
sys.exit(subprocess.run(["{real}", *args], input=data).returncode)
"""


def _wrap(directory: Path, tool: str, template: str, marker: str) -> None:
    real = shutil.which(tool)
    if real is None:
        raise FileNotFoundError(tool)
    wrapper = directory / tool
    wrapper.write_text(template.format(python=sys.executable, marker=marker, tool=tool, real=real))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)


def refusing_env(directory: Path, marker: str) -> dict[str, str]:
    """Write the wrappers into ``directory``; an environment that finds them first."""
    for tool in _TOOLS:
        _wrap(directory, tool, _WRAPPER, marker)
    if shutil.which("nft") is not None:
        _wrap(directory, "nft", _NFT_WRAPPER, marker)
    env = dict(os.environ)
    env["PATH"] = f"{directory}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    return env
