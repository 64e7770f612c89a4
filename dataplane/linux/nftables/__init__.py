"""nf_tables, natively: what the nftables backend writes without the ``nft`` tool.

Beside ``iptables/`` and importing only ``kernel/``. See ``docs/nftables.md``
for the backend this grows into.
"""
