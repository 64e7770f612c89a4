"""iptables: the save-format values and parser, the backend choice, one table's programmer.

Knows chains and rules as text the kernel's tools read and print; knows
nothing of policies or services (``render/`` turns those into chains).
"""
