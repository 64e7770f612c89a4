"""Timestamps of nf_tables commits naming given addresses, inside one namespace.

Run with ``ip netns exec NS python3 _nft_events.py``: each IPv4 address
written to stdin (one per line) is watched for; the first nf_tables
notification (the multicast group ``nft monitor`` listens to) whose bytes
hold it prints ``ADDRESS MONOTONIC`` and the address is forgotten. An
address is asked for before the write that brings it, but on a loaded
machine the thread reading stdin can take it after the peer's commit (a
commit is a few milliseconds away): the last seconds of notifications are
kept, and a new address is looked for in them first. Notifications the
socket dropped (ENOBUFS) print ``overrun MONOTONIC``: a change missed then
may be the reader's loss, not the peer's.

Not ``nft monitor``: it keeps a copy of the whole ruleset in userspace and
at 20,000 services falls minutes behind the kernel, a whole core busy,
which measured the monitor rather than the peer. Reading the raw messages
costs the same at any size: the address's four bytes are found in a rule's
immediate data or a set element's key, whichever a peer writes.
"""

from __future__ import annotations

import collections
import socket
import sys
import threading
import time

NETLINK_NETFILTER = 12
NFNLGRP_NFTABLES = 7
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1
SO_RCVBUFFORCE = 33
KEPT = 10.0  # seconds of notifications kept for an address asked for late
KEPT_BYTES = 64 << 20  # and at most this much of them (a peer's full reload is large)

wanted: dict[bytes, str] = {}
recent: collections.deque[tuple[float, bytes]] = collections.deque()
lock = threading.Lock()


def read_wanted() -> None:
    for line in sys.stdin:
        address = line.strip()
        if not address:
            continue
        packed = socket.inet_aton(address)
        with lock:
            # Fresh addresses only: one already in a notification came with
            # the change asked for, whichever thread ran first.
            at = next((t for t, data in recent if packed in data), None)
            if at is None:
                wanted[packed] = address
            else:
                print(f"{address} {at:.6f}", flush=True)


def main() -> None:
    recent_bytes = 0  # of the notifications in recent
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
            print(f"overrun {time.monotonic():.6f}", flush=True)
            continue
        now = time.monotonic()
        with lock:
            recent.append((now, data))
            recent_bytes += len(data)
            while recent and (recent[0][0] < now - KEPT or recent_bytes > KEPT_BYTES):
                recent_bytes -= len(recent.popleft()[1])
            found = [packed for packed in wanted if packed in data]
            for packed in found:
                print(f"{wanted.pop(packed)} {now:.6f}", flush=True)


if __name__ == "__main__":
    main()
