"""Timestamps of nf_tables commits naming given addresses, inside one namespace.

Run with ``ip netns exec NS python3 _nft_events.py``: each IPv4 address
written to stdin (one per line) is watched for; the first nf_tables
notification (the multicast group ``nft monitor`` listens to) whose bytes
hold it prints ``ADDRESS MONOTONIC`` and the address is forgotten.

Not ``nft monitor``: it keeps a copy of the whole ruleset in userspace and
at 20,000 services falls minutes behind the kernel, a whole core busy,
which measured the monitor rather than the peer. Reading the raw messages
costs the same at any size: the address's four bytes are found in a rule's
immediate data or a set element's key, whichever a peer writes.
"""

from __future__ import annotations

import socket
import sys
import threading
import time

NETLINK_NETFILTER = 12
NFNLGRP_NFTABLES = 7
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1
SO_RCVBUFFORCE = 33

wanted: dict[bytes, str] = {}
lock = threading.Lock()


def read_wanted() -> None:
    for line in sys.stdin:
        address = line.strip()
        if address:
            with lock:
                wanted[socket.inet_aton(address)] = address


def main() -> None:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
    sock.bind((0, 0))
    sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, NFNLGRP_NFTABLES)
    threading.Thread(target=read_wanted, daemon=True).start()
    print("listening", flush=True)
    while True:
        try:
            data = sock.recv(1 << 20)
        except OSError:  # ENOBUFS: some notifications lost; later ones still count
            continue
        now = time.monotonic()
        with lock:
            found = [packed for packed in wanted if packed in data]
            for packed in found:
                print(f"{wanted.pop(packed)} {now:.6f}", flush=True)


if __name__ == "__main__":
    main()
