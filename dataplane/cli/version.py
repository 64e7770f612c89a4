"""``version``: the package's version and the platforms it can program."""

from __future__ import annotations

import argparse

__all__ = ["FLAG_HELP", "HELP", "VERSION", "add_arguments", "line", "run", "version"]

HELP = "print the version and the platforms available"
# --version, the one option with no variable (the page of options names it too).
FLAG_HELP = "print the version and the platforms available, as the version command"

# The package's version: pyproject.toml reads it from here.
VERSION = "0.1.0"


def version() -> str:
    return VERSION


def line() -> str:
    return f"dataplane {version()} (Felix felixbackend.proto; platforms: linux, windows, sim)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    print(line())
    return 0
