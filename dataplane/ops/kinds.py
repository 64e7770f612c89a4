"""The kinds of object ``show`` lists, in the order it prints them.

Here, without imports, so that the command line can list and check them
(``show --kind``) without loading the models.
"""

from __future__ import annotations

__all__ = ["HNS_KINDS", "KIND_ORDER", "OWN_KINDS", "SHOWN_KINDS"]

# What a packet meets first: the desired objects the messages name.
KIND_ORDER = (
    "workload_endpoint",
    "host_endpoint",
    "policy",
    "profile",
    "ipset",
    "service",
    "route",
    "vtep",
    "host",
    "ip_pool",
)

# Kinds a platform reports that no message names: shown only while refused.
OWN_KINDS = (
    "chain",
    "interface",
    "load_balancer",
    "network",
    "remote_endpoint",
    "vxlan",
    "setting",  # a Felix setting the driver refuses (dataplane/felix_settings.py)
    "field",  # a message field the driver refuses (dataplane/felix_fields.py)
)

# What a simulated HNS host file holds (``show --hns``).
HNS_KINDS = ("hns_network", "hns_endpoint", "hns_load_balancer")

SHOWN_KINDS = (*KIND_ORDER, *OWN_KINDS, *HNS_KINDS)
