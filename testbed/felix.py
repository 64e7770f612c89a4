"""calico-felix for one node of the test bed, with our driver as its dataplane.

Felix runs in the node's namespace in KDD mode with
``UseInternalDataplaneDriver=false`` and ``DataplaneDriver`` the
``dataplane-driver`` beside this interpreter; it starts the driver itself
(fds 3 and 4, its own environment) as it would in calico-node.

What a bare host lacks is the test bed's to set, never the driver's: no
syslog (``LogSeveritySys: none``), no log file, no usage reporting (it
would reach out of the sandbox), endpoint-status files in a directory of
the test's, and a log that drops no line (the tests read it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from testbed.topology import Node

__all__ = ["DRIVER", "Felix"]

DRIVER = Path(sys.executable).with_name("dataplane-driver")


class Felix:
    """One calico-felix process for one node, as calico-node's supervisor runs it.

    Felix exits 129 after a config change (and the supervisor starts it
    again); :meth:`restart_if_exited` plays the supervisor.
    """

    def __init__(
        self,
        binary: Path,
        *,
        node: Node,
        name: str,
        kubeconfig: Path,
        workdir: Path,
        env: dict[str, str],
    ) -> None:
        self.binary = binary
        self.node = node
        self.name = name
        self.status_dir = workdir / f"status-{name}"
        self.status_dir.mkdir(exist_ok=True)
        self.log_path = workdir / f"felix-{name}.log"
        self.env = {
            **os.environ,
            "FELIX_DATASTORETYPE": "kubernetes",
            "KUBECONFIG": str(kubeconfig),
            "FELIX_FELIXHOSTNAME": name,
            "NODENAME": name,
            "FELIX_USEINTERNALDATAPLANEDRIVER": "false",
            "FELIX_DATAPLANEDRIVER": str(DRIVER),
            # A bare host's settings (the test bed's, not the driver's):
            "FELIX_LOGSEVERITYSYS": "none",
            "FELIX_LOGFILEPATH": "none",
            "FELIX_LOGSEVERITYSCREEN": "info",
            "FELIX_USAGEREPORTINGENABLED": "false",
            "FELIX_IPV6SUPPORT": "false",
            "FELIX_ENDPOINTSTATUSPATHPREFIX": str(self.status_dir),
            # The pod MTU our driver writes for the CNI plugin: the bed's, not the host's.
            "DATAPLANE_MTU_FILE": str(self.status_dir / "mtu"),
            # Tests read Felix's log: every line, even when it is busy
            # (by default it drops lines it cannot write fast enough).
            "FELIX_DEBUGDISABLELOGDROPPING": "true",
            **env,
        }
        self.exits: list[int] = []
        self.proc = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        with self.log_path.open("ab") as log:
            return subprocess.Popen(
                ["ip", "netns", "exec", self.node.netns, str(self.binary)],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def restart_if_exited(self) -> bool:
        """If Felix has exited, note its code and start it again (the supervisor's job)."""
        code = self.proc.poll()
        if code is None:
            return False
        self.exits.append(code)
        self.proc = self._spawn()
        return True

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, as calico-node's supervisor stops it; its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode
