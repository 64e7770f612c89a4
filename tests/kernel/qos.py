"""Helpers of the QoS kernel tests: a pod's update with its controls, and a
receiver in one pod answering for what a sender in another sent."""

from __future__ import annotations

import subprocess

from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.topology import Namespace
from tests.kernel import scenario
from tests.kernel.cluster import Cluster


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
