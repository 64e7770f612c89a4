"""Timestamps of nf_tables commits naming given addresses or names, inside one namespace.

Run with ``ip netns exec NS python3 _nft_events.py``: each token written
to stdin (one per line) is watched for: an IPv4 address as its four bytes,
anything else (an interface name) as its ASCII bytes. The first nf_tables
notification (the multicast group ``nft monitor`` listens to) whose bytes
hold it prints ``TOKEN MONOTONIC`` and the token is forgotten. A token is
asked for before the write that brings it, but on a loaded machine the
thread reading stdin can take it after the peer's commit (a commit is a few
milliseconds away): the last seconds of notifications are kept, and a new
token is looked for in them first. Notifications the socket dropped
(ENOBUFS) print ``overrun MONOTONIC``: a change missed then may be the
reader's loss, not the peer's.

Not ``nft monitor``: it keeps a copy of the whole ruleset in userspace and
at 20,000 services falls minutes behind the kernel, a whole core busy,
which measured the monitor rather than the peer. Reading the raw messages
costs the same at any size: an address's four bytes are found in a rule's
immediate data or a set element's key, whichever a peer writes; an
interface name in a rule's comparison, a chain's name or a map's key.
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
KEPT = 10.0  # seconds of notifications kept for a token asked for late
KEPT_BYTES = 64 << 20  # and at most this much of them (a peer's full reload is large)

wanted: dict[bytes, str] = {}
recent: collections.deque[tuple[float, bytes]] = collections.deque()
lock = threading.Lock()


def read_wanted() -> None:
    for line in sys.stdin:
        token = line.strip()
        if not token:
            continue
        try:
            packed = socket.inet_aton(token)
        except OSError:
            packed = token.encode()  # a name: its bytes as the kernel holds them
        with lock:
            # Fresh tokens only: one already in a notification came with
            # the change asked for, whichever thread ran first.
            at = next((t for t, data in recent if packed in data), None)
            if at is None:
                wanted[packed] = token
            else:
                print(f"{token} {at:.6f}", flush=True)


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
