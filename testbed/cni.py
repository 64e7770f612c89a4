"""A CNI stand-in: adds or removes a pod's endpoint on a simulated host another process uses.

On a real Windows node the CNI plugin creates a pod's HNS endpoint before
Felix sends its ``WorkloadEndpointUpdate``, and deletes it when the pod
goes, while the driver runs. This does the same to a host file a driver
has open (``--hns-fake FILE``), through the file's sharing protocol
(:mod:`dataplane.windows.sim.simhost_file`).

``python -m testbed.cni FILE add NAMESPACE NAME INDEX`` adds the endpoint
of the pod whose addresses follow from INDEX (as the demo's pods do);
``python -m testbed.cni FILE remove NAMESPACE NAME`` deletes it. Prints
the endpoint's HNS id.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from dataplane.windows.sim.simhost import SimHost
from testbed.hns import add_pod
from testbed.node import PodSpec

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.cni", description=__doc__)
    parser.add_argument("file", type=Path)
    parser.add_argument("action", choices=["add", "remove"])
    parser.add_argument("namespace")
    parser.add_argument("name")
    parser.add_argument("index", nargs="?", type=int, default=0)
    args = parser.parse_args(argv)
    host = SimHost.load(args.file)
    if args.action == "add":
        created = add_pod(host, PodSpec(args.name, args.namespace, args.name, args.index))
        print(created["ID"])
        return 0
    wanted = f"{args.namespace}_{args.name}_eth0"
    found = [i for i, ep in host.endpoints.items() if ep.get("Name") == wanted]
    if not found:
        print(f"no endpoint named {wanted}", file=sys.stderr)
        return 1
    host.remove_local_endpoint(found[0])
    print(found[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
