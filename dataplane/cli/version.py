"""``version``: the package's version and the platforms it can program."""

from __future__ import annotations

import argparse
from importlib import metadata

__all__ = ["HELP", "add_arguments", "line", "run", "version"]

HELP = "print the version and the platforms available"


def version() -> str:
    try:
        return metadata.version("dataplane")
    except metadata.PackageNotFoundError:
        return "unknown"


def line() -> str:
    return f"dataplane {version()} (Felix felixbackend.proto; platforms: linux, windows, sim)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    print(line())
    return 0
