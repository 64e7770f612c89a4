"""The kernel's tools and knobs: running ``iptables-restore``/``ipset``, sysctls, conntrack.

The bottom layer of the Linux platform: nothing here imports the rest of
``dataplane.linux``. :data:`~dataplane.linux.kernel.errors.KERNEL_ERRORS`
is what a kernel call may raise; anything else is a bug.
"""
