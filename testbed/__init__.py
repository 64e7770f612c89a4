"""Throwaway nodes in network namespaces, shared by the tests, the demo and the benchmarks.

``topology`` builds nodes, pods and uplink hosts wired as Calico's CNI wires
them and deletes every namespace it made; ``underlay`` puts several nodes on
routed subnets with no pod routes, for overlay tests; ``agent`` is the probe
process each namespace runs; ``node`` builds the Felix messages that
describe such a node.
Nothing here is part of the driver: it only ever talks to namespaces it made.
"""
