"""The Linux platform: iptables, ipsets, routes and interface settings.

Renderers here are pure (model in, frozen values out); programmers are the
only code that touches the kernel, through the injected command runner and
netlink handle, so every one of them can run against a fake or against a
real network namespace.
"""
