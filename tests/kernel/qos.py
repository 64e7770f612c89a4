"""Helpers of the QoS tests (kernel and real-Felix): a pod's update with its
controls, and the two measurements a receiver makes of what a sender sent:
a bulk TCP transfer's rate and a datagram's TOS byte."""

from __future__ import annotations

import subprocess

from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.topology import Namespace
from tests.kernel import scenario
from tests.kernel.cluster import Cluster

__all__ = ["bits_per_second", "qos_update", "received", "tos"]

# Reads one connection to its end: the bytes, and the seconds from the first to the last.
_SINK = """
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(1)
print("ready", flush=True)
s.settimeout(20)
conn, _ = s.accept()
conn.settimeout(20)
first = None
total = 0
while True:
    data = conn.recv(1 << 16)
    if not data:
        break
    if first is None:
        first = time.monotonic()
    total += len(data)
print(total, time.monotonic() - (first or time.monotonic()), flush=True)
"""

_SOURCE = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
s.sendall(b"x" * int(sys.argv[3]))
s.shutdown(socket.SHUT_WR)
s.recv(1)
"""

# Prints the TOS byte of the first datagram that arrives (IP_RECVTOS), or "none".
_TOS = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.settimeout(5)
print("ready", flush=True)
try:
    _, ancillary, _, _ = s.recvmsg(2048, socket.CMSG_SPACE(1))
except socket.timeout:
    print("none", flush=True)
else:
    print([data[0] for level, kind, data in ancillary if kind == socket.IP_TOS][0], flush=True)
"""

_DATAGRAMS = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(3):
    s.sendto(b"dscp", (sys.argv[1], int(sys.argv[2])))
"""


def qos_update(cluster: Cluster, name: str, **controls: int) -> pb.WorkloadEndpointUpdate:
    """Pod ``name``'s endpoint (allow-all profile only) with these QoS controls."""
    update = scenario.endpoint(scenario.pod(name), cluster.pods[name].iface, policies=False)
    if controls:
        update.endpoint.qos_controls.CopyFrom(pb.QoSControls(**controls))
    return update


def received(dst: Namespace, receiver: str, src: Namespace, sender: str, *args: str) -> str:
    """Start ``receiver`` (a Python script that prints "ready", then one
    line of results) in ``dst`` with ``args[0]`` (its port), run ``sender``
    in ``src`` with ``dst``'s address and ``args``; the receiver's line."""
    argv = ["ip", "netns", "exec", dst.netns, "python3", "-c", receiver, args[0]]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
            src.run("python3", "-c", sender, dst.address(4), *args)
            return process.stdout.readline().strip()
        finally:
            process.kill()


def bits_per_second(src: Namespace, dst: Namespace, port: int, size: int) -> float:
    """The rate a bulk TCP transfer of ``size`` bytes from ``src`` to ``dst`` moves at."""
    total, seconds = received(dst, _SINK, src, _SOURCE, str(port), str(size)).split()
    assert int(total) == size
    return int(total) * 8 / max(float(seconds), 1e-6)


def tos(src: Namespace, dst: Namespace, port: int) -> int | None:
    """The TOS byte ``dst`` reads on a datagram ``src`` sends it (None: none came)."""
    line = received(dst, _TOS, src, _DATAGRAMS, str(port))
    return None if line == "none" else int(line)
