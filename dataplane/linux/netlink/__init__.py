"""Netlink: links, routes and the VXLAN devices with their neighbour and FDB entries.

Writes go many per system call over a raw socket (``batch``), whole-table
reads through dumps (``dump``); the overlay plan is the VXLAN state this
node should have, computed from Felix's values.
"""
