"""Run every fuzz target for a bounded budget; report executions, coverage and crashes.

::

    python -m fuzz.run [--seconds S | --runs N] [--target NAME ...] [--work DIR]
                       [--findings DIR] [--seed N] [--no-suppress]

Each target runs in a process of its own (``python -m fuzz.target NAME``,
libFuzzer under atheris, ``dataplane.*`` instrumented), one after the
other: libFuzzer ends its process when done, and one core is enough. The
seeds in ``fuzz/corpus/<target>/`` are read, never written; what the fuzzer
adds goes to ``--work`` (a temporary directory unless given, so a longer
run can resume there). Crash reproducers go to ``--findings`` (default
``fuzz/findings/``). Per target it prints the executions run, libFuzzer's
coverage (``cov``: edges of dataplane.* reached; ``ft``: features), the
corpus size, known findings suppressed (:mod:`fuzz.known`) and any crash
with its reproducer. Exit status 1 if any target crashed, hung or failed
to run; else 0.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Result", "main", "run_target"]

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"
TARGETS = ("frames", "envelopes", "managers")
MAX_LEN = {"frames": 8192, "envelopes": 16384, "managers": 16384}
_STARTUP_SLACK = 120.0  # seconds beyond the budget before a target counts as hung

_DESCRIPTION = "Run every fuzz target for a bounded budget; report executions, coverage, crashes."
_EXECS = re.compile(r"stat::number_of_executed_units:\s*(\d+)")
_COV = re.compile(r"cov: (\d+) ft: (\d+) corp: (\d+)/")
_ARTIFACT = re.compile(r"Test unit written to (\S+)")
_KNOWN = re.compile(r"fuzz: known finding (\S+) suppressed")


@dataclass(slots=True)
class Result:
    target: str
    returncode: int | None  # None: killed after the budget (hung)
    seconds: float
    executions: int | None = None
    cov: int | None = None
    features: int | None = None
    corpus: int | None = None
    known: list[str] = field(default_factory=list)
    artifact: str | None = None
    crash: str = ""  # what the target printed about the failure

    @property
    def failed(self) -> bool:
        return self.returncode != 0

    def summary(self) -> str:
        execs = "?" if self.executions is None else str(self.executions)
        line = f"{self.target}: {execs} executions in {self.seconds:.1f} s"
        if self.cov is not None:
            line += f", coverage cov={self.cov} ft={self.features}, corpus {self.corpus}"
        if self.known:
            line += f", known findings suppressed: {', '.join(self.known)}"
        if self.returncode is None:
            return line + ": HUNG (killed after the budget)"
        if not self.failed:
            return line + ": no crash"
        line += f": CRASH (exit {self.returncode})"
        if self.artifact:
            line += f"\n  reproducer: {self.artifact}"
            line += f"\n  replay:     python -m fuzz.replay {self.target} {self.artifact}"
        return line + "\n" + "\n".join("  | " + s for s in self.crash.splitlines())


def _crash_text(output: str) -> str:
    """The part of libFuzzer's output that says what went wrong."""
    lines = output.splitlines()
    for marker in ("=== Uncaught Python exception: ===", "==ERROR:", "ERROR: libFuzzer"):
        hits = [i for i, s in enumerate(lines) if marker in s]
        if hits:
            start = hits[0]
            end = next(
                (i for i in range(start, len(lines)) if lines[i].startswith("SUMMARY:")),
                len(lines) - 1,
            )
            return "\n".join(lines[start : min(end + 1, start + 80)])
    return "\n".join(lines[-30:])


def run_target(
    target: str,
    *,
    seconds: float | None,
    runs: int | None,
    work: Path,
    findings: Path,
    seed: int | None = None,
    suppress: bool = True,
) -> Result:
    """One target under libFuzzer for the budget; its result."""
    work.mkdir(parents=True, exist_ok=True)
    findings.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "fuzz.target",
        target,
        f"-max_len={MAX_LEN[target]}",
        "-timeout=30",
        "-rss_limit_mb=2048",
        "-print_final_stats=1",
        f"-artifact_prefix={findings}/{target}-",
    ]
    if seconds is not None:
        cmd.append(f"-max_total_time={max(1, round(seconds))}")
    if runs is not None:
        cmd.append(f"-runs={runs}")
    if seed is not None:
        cmd.append(f"-seed={seed}")
    cmd += [str(work), str(CORPUS / target)]
    env = None if suppress else {**os.environ, "FUZZ_NO_SUPPRESS": "1"}
    print("$ " + " ".join(cmd[1:]).replace(str(ROOT) + "/", ""), flush=True)
    limit = None if seconds is None else seconds + _STARTUP_SLACK
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as log:
        try:
            proc = subprocess.run(
                cmd,
                check=False,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=limit,
                env=env,
            )
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            code = None
        log.seek(0)
        output = log.read()
    result = Result(target, code, time.monotonic() - start)
    if m := _EXECS.search(output):
        result.executions = int(m[1])
    if covs := _COV.findall(output):
        result.cov, result.features, result.corpus = (int(x) for x in covs[-1])
    result.known = sorted(set(_KNOWN.findall(output)))
    if m := _ARTIFACT.search(output):
        result.artifact = m[1]
    if result.failed:
        result.crash = _crash_text(output)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz.run", description=_DESCRIPTION)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--seconds", type=float, help="per target (default 60)")
    budget.add_argument("--runs", type=int, help="executions per target")
    parser.add_argument("--target", action="append", choices=TARGETS, help="default: all")
    parser.add_argument("--work", type=Path, help="corpus work dir (default: temporary)")
    parser.add_argument("--findings", type=Path, default=ROOT / "fuzz" / "findings")
    parser.add_argument("--seed", type=int, help="libFuzzer's -seed, for a repeatable run")
    parser.add_argument(
        "--no-suppress", action="store_true", help="fail on known findings too (fuzz/known.py)"
    )
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None or args.runs is not None else 60.0
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="fuzz-work-") as tmp:
        work = args.work or Path(tmp)
        for target in args.target or TARGETS:
            result = run_target(
                target,
                seconds=seconds,
                runs=args.runs,
                work=work / target,
                findings=args.findings.resolve(),
                seed=args.seed,
                suppress=not args.no_suppress,
            )
            print(result.summary(), flush=True)
            results.append(result)
    failed = [r.target for r in results if r.failed]
    print(f"fuzz: {len(results) - len(failed)}/{len(results)} targets clean", end="")
    print(f"; findings in {', '.join(failed)}" if failed else "")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
