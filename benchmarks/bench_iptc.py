"""libiptc (python-iptables) vs iptables-legacy-restore/-save, on a legacy host.

The Linux platform writes through ``iptables-restore --noflush`` and reads
through ``iptables-save``. python-iptables (libiptc, in-process) is the
alternative on legacy hosts; this script measures both for the jobs the
Table programmer does, in a throwaway network namespace:

* bulk write: create N chains of M rules in one transaction;
* small write: rewrite one chain of M rules in an already loaded table;
* read: list our chains with their rule comments (the hash diff's input).

Usage (root): python benchmarks/bench_iptc.py [--chains N] [--rules M]
It re-executes itself inside the namespace it creates.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import run_inside_netns


def _restore_script(chains: int, rules: int, only: int | None = None) -> str:
    lines = ["*filter"]
    names = [f"cali-b{i:05d}" for i in range(chains)]
    targets = names if only is None else [names[only]]
    lines += [f":{n} - [0:0]" for n in targets]
    for n in targets:
        lines += [
            f'-A {n} -m comment --comment "cali:{n}{r:04d}" -p tcp -s 10.{r % 250}.0.0/16'
            f" --dport {1000 + r} -j ACCEPT"
            for r in range(rules)
        ]
    lines += ["COMMIT", ""]
    return "\n".join(lines)


def _time(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _restore(script: str) -> None:
    subprocess.run(["iptables-legacy-restore", "--noflush"], input=script.encode(), check=True)


def _flush() -> None:
    subprocess.run(["iptables-legacy", "-F"], check=True)
    subprocess.run(["iptables-legacy", "-X"], check=True)


def _iptc_write(chains: int, rules: int, only: int | None = None) -> None:
    import iptc  # type: ignore[import-untyped]  # noqa: PLC0415 - legacy hosts only

    table = iptc.Table(iptc.Table.FILTER)
    table.autocommit = False
    table.refresh()  # libiptc caches the table; a stale cache cannot commit
    indices = range(chains) if only is None else [only]
    for i in indices:
        name = f"cali-b{i:05d}"
        chain = iptc.Chain(table, name) if table.is_chain(name) else table.create_chain(name)
        chain.flush()
        for r in range(rules):
            rule = iptc.Rule()
            rule.protocol = "tcp"
            rule.src = f"10.{r % 250}.0.0/16"
            comment = rule.create_match("comment")
            comment.comment = f"cali:{name}{r:04d}"
            rule.create_match("tcp").dport = str(1000 + r)
            rule.target = iptc.Target(rule, "ACCEPT")
            chain.append_rule(rule)
    table.commit()
    table.autocommit = True


def _iptc_read() -> int:
    import iptc  # noqa: PLC0415

    table = iptc.Table(iptc.Table.FILTER)
    table.refresh()
    count = 0
    for chain in table.chains:
        if chain.name.startswith("cali-"):
            for rule in chain.rules:
                count += sum(1 for m in rule.matches if m.name == "comment")
    return count


def _save_read() -> int:
    from dataplane.linux.iptables.chains import parse_save  # noqa: PLC0415

    out = subprocess.run(
        ["iptables-legacy-save", "-t", "filter"], capture_output=True, check=True
    ).stdout.decode()
    tables = parse_save(out)
    return sum(
        len(c.hashes) for c in tables["filter"].chains.values() if c.name.startswith("cali-")
    )


def _bulk_restore(chains: int, rules: int) -> None:
    _flush()
    _restore(_restore_script(chains, rules))


def _bulk_iptc(chains: int, rules: int) -> None:
    _flush()
    _iptc_write(chains, rules)


def inside(chains: int, rules: int, repeat: int) -> None:
    rows = []
    for label, restore_fn, iptc_fn in (
        (
            f"bulk write ({chains} chains x {rules} rules)",
            lambda: _bulk_restore(chains, rules),
            lambda: _bulk_iptc(chains, rules),
        ),
        (
            f"small write (1 chain of {rules} rules, table loaded)",
            lambda: _restore(_restore_script(chains, rules, only=chains // 2)),
            lambda: _iptc_write(chains, rules, only=chains // 2),
        ),
        ("read our chains (with comments)", _save_read, _iptc_read),
    ):
        _flush()
        _restore(_restore_script(chains, rules))
        t_restore = _time(restore_fn, repeat)
        _flush()
        _restore(_restore_script(chains, rules))
        t_iptc = _time(iptc_fn, repeat)
        rows.append((label, t_restore, t_iptc))
    print("| job | iptables-legacy-restore/-save | python-iptables (libiptc) |")
    print("| --- | --- | --- |")
    for label, a, b in rows:
        print(f"| {label} | {a * 1000:.1f} ms | {b * 1000:.1f} ms |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chains", type=int, default=1000)
    parser.add_argument("--rules", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args.chains, args.rules, args.repeat)
        return
    args_out = ["--chains", str(args.chains), "--rules", str(args.rules)]
    run_inside_netns(__file__, [*args_out, "--repeat", str(args.repeat)], "dpbench")


if __name__ == "__main__":
    main()
