"""A simulated Windows node: an HNS host with the endpoints a CNI would have made.

Used by the Windows tests, the benchmark and the README's example host
file. One ``Calico`` L2Bridge network (the name ``KUBE_NETWORK`` matches)
holds a local endpoint per pod; a ``nat`` network the driver must ignore
and a remote endpoint (kube-proxy's, ``Flags`` 1) it must skip sit beside
them, as on a real node.

``python -m testbed.hns FILE [--version M.m]`` writes such a host, for the
pods of the README demo, to FILE.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from dataplane.windows.hns.hcn import HnsVersion, Json
from dataplane.windows.sim.simhost import NEWEST, SimHost
from testbed.node import PodSpec

__all__ = ["add_pod", "calico_host", "main"]

NETWORK_NAME = "Calico"
NETWORK_ID = "C0FFEE00-0000-4000-8000-000000000001"
NAT_NETWORK_ID = "C0FFEE00-0000-4000-8000-000000000002"


def _mac(address: str) -> str:
    """A MAC for an endpoint, from its IPv4 address (dashed, as HNS spells MACs)."""
    packed = ipaddress.ip_address(address).packed[-4:]
    return "-".join(["00", "15", *(f"{b:02x}" for b in packed)])


def add_pod(host: SimHost, pod: PodSpec) -> Json:
    """The pod's endpoint, as the CNI creates it (uncounted: it is not the driver's call)."""
    return host.add_local_endpoint(
        NETWORK_ID,
        {
            "Name": f"{pod.namespace}_{pod.name}_eth0",
            "IpConfigurations": [
                {"IpAddress": pod.ipv4, "PrefixLength": 16},
                {"IpAddress": pod.ipv6, "PrefixLength": 64},
            ],
            "MacAddress": _mac(pod.ipv4),
            "SchemaVersion": {"Major": 2, "Minor": 0},
        },
    )


def calico_host(
    pods: Iterable[PodSpec],
    version: HnsVersion = NEWEST,
    *,
    path: Path | None = None,
    latency: float = 0.0,
    network_type: str = "L2Bridge",
) -> SimHost:
    """A host with the Calico network, one local endpoint per pod, and decoys.

    ``network_type`` "Overlay" makes the Calico network a VXLAN one (remote
    pods reached through their node's address).
    """
    host = SimHost(version, path=path, latency=latency)
    host.add_network(
        {
            "ID": NETWORK_ID,
            "Name": NETWORK_NAME,
            "Type": network_type,
            "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": "10.65.0.0/16"}]}],
            "SchemaVersion": {"Major": 2, "Minor": 0},
        }
    )
    host.add_network({"ID": NAT_NETWORK_ID, "Name": "nat", "Type": "NAT"})
    for pod in pods:
        add_pod(host, pod)
    host.add_local_endpoint(
        NAT_NETWORK_ID,
        {
            "Name": "host-vnic",
            "IpConfigurations": [{"IpAddress": "172.29.0.2", "PrefixLength": 20}],
        },
    )
    host.add_local_endpoint(
        NETWORK_ID,
        {
            "Name": "remote-10.65.9.9",
            "IpConfigurations": [{"IpAddress": "10.65.9.9"}],
            "MacAddress": "02-11-0a-41-09-09",  # kube-proxy's: 02-11 then the address
            "Flags": 1,  # RemoteEndpoint: a pod on another node
            # On an Overlay network its node's address (the VXLAN destination).
            "Policies": [
                {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.99"}}
            ]
            if network_type.lower() == "overlay"
            else [],
        },
    )
    return host


def main(argv: Sequence[str] | None = None) -> int:
    from examples.demo_node import PODS, SCALE_UP  # noqa: PLC0415 - the demo's pods

    parser = argparse.ArgumentParser(prog="python -m testbed.hns", description=__doc__)
    parser.add_argument("file", type=Path)
    parser.add_argument(
        "--version", default=str(NEWEST), help="HNS version M.m (default %(default)s)"
    )
    args = parser.parse_args(argv)
    major, _, minor = args.version.partition(".")
    host = calico_host([*PODS, SCALE_UP], HnsVersion(int(major), int(minor or 0)))
    args.file.write_text(json.dumps(host.snapshot(), indent=1, sort_keys=True) + "\n")
    print(
        f"wrote {args.file}: HNS {args.version}, {len(host.endpoints)} endpoints", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
