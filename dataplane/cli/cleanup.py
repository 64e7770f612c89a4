"""``cleanup``: remove everything ours from this node (Linux) and restore forwarding."""

from __future__ import annotations

import argparse
import logging
import sys

import trio

from dataplane.cli.platforms import linux_platform
from dataplane.errors import PlatformUnavailableError

__all__ = ["HELP", "add_arguments", "run"]

log = logging.getLogger("dataplane.cli")

HELP = (
    "remove every chain, rule, IP set, nftables table, route and interface sysctl of ours"
    " (both iptables backends and native nftables) in this network namespace, and put"
    " the forwarding sysctls the driver changed here back as it found them"
    " (--sysctl-state); touches nothing else"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    try:
        platform = linux_platform(args)
    except PlatformUnavailableError as exc:
        print(f"{args.prog} cleanup: {exc}", file=sys.stderr)
        return 1
    trio.run(platform.cleanup)
    log.info(
        "cleanup done: our chains, rules, IP sets, nftables tables, routes and interface"
        " sysctls removed,"
        " forwarding sysctls we changed restored"
    )
    return 0
