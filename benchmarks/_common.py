"""Helpers the kernel benchmarks share: timing a tool, percentiles, reports, a namespace."""

from __future__ import annotations

import compileall
import contextlib
import math
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from testbed.topology import Namespace

__all__ = [
    "compile_bytecode",
    "each_backend",
    "machine",
    "markdown_table",
    "metric_sum",
    "metrics_text",
    "peak_rss_mb",
    "percentile",
    "print_row",
    "run_inside_netns",
    "sample_sum",
    "timed_tool",
]


def timed_tool(argv: list[str], stdin_path: Path) -> float:
    """Run ``argv`` with ``stdin_path`` as input; its wall time in seconds."""
    with stdin_path.open("rb") as stdin:
        start = time.perf_counter()
        proc = subprocess.run(argv, stdin=stdin, capture_output=True, check=False)
        elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr[:500]!r}")
    return elapsed


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (p99 of 50 values is the largest)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def metrics_text(ns: Namespace, url: str) -> str:
    """One scrape of ``url``, from inside ``ns``."""
    script = f"import urllib.request as u; print(u.urlopen({url!r}, timeout=10).read().decode())"
    return ns.run(sys.executable, "-c", script).stdout


def sample_sum(text: str, pattern: str) -> float:
    """Sum of a scrape's samples whose line matches ``pattern``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith("#") and re.search(pattern, line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def metric_sum(ns: Namespace, url: str, pattern: str) -> float:
    """Sum of the samples of ``url`` (inside ``ns``) whose line matches ``pattern``."""
    return sample_sum(metrics_text(ns, url), pattern)


def peak_rss_mb(pid: int) -> float:
    """A process's peak resident set (``VmHWM``), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _tool_version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, check=False, timeout=10).stdout
        return out.decode().strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "?"


def machine() -> str:
    """One line naming the machine and the kernel tools' versions."""
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    tools = ", ".join(
        _tool_version(argv)
        for argv in (
            ["iptables-legacy", "--version"],
            ["iptables-nft", "--version"],
            ["ipset", "--version"],
            ["nft", "--version"],
        )
    )
    return (
        f"nproc {os.cpu_count()}, {cpu}, kernel {platform.release()}, "
        f"Python {platform.python_version()}, {tools}"
    )


def run_inside_netns(script: str, args: Sequence[str], prefix: str) -> None:
    """Run ``script --inside ARGS`` in a throwaway network namespace, deleted after.

    For benchmarks that measure the kernel from inside one namespace (their
    own netlink sockets, tables and sets live there).
    """
    netns = f"{prefix}{os.getpid() % 10000}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        argv = ["ip", "netns", "exec", netns, sys.executable, script, "--inside", *args]
        subprocess.run(argv, check=True)
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)


def print_row(row: Sequence[str]) -> None:
    """One markdown table row, now (a child in a namespace prints its own)."""
    print("| " + " | ".join(row) + " |", flush=True)


def each_backend(
    script: str, header: list[str], backends: str, args: Sequence[str], prefix: str
) -> None:
    """Print ``header``, then run ``script --inside --backend B ARGS`` for each
    comma-separated backend, each in a throwaway namespace of its own, where
    it prints its rows of the table."""
    print(markdown_table(header, []), flush=True)
    for backend in backends.split(","):
        run_inside_netns(script, ["--backend", backend, *args], prefix)


def compile_bytecode() -> str:
    """The driver's modules as bytecode in their ``__pycache__`` (ignored by
    git), as every deployed driver has them: the image compiles them at
    build (``UV_COMPILE_BYTECODE=1``, ``deploy/Dockerfile``), pip compiles a
    wheel it installs. A benchmark that starts the driver as a process
    calls this first: under ``PYTHONDONTWRITEBYTECODE`` (this machine's
    environment sets it) an editable checkout compiles ~270 modules from
    source at every start, 0.1-0.2 s no node pays. Returns the line to print."""
    package = Path(__file__).resolve().parent.parent / "dataplane"
    if not compileall.compile_dir(package, quiet=1):
        raise RuntimeError(f"compileall failed on {package}")
    return "the driver's modules compiled to bytecode, as in the image"
