"""Bad option values end in one line naming the option (or variable), the value
and what is accepted, exit 2 — never a traceback; enumerations take any case."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dataplane import cli
from dataplane.wire._pb import felixbackend_pb2 as pb
from dataplane.wire.msglog import write_log
from tests.conftest import REPO
from tests.test_cli_env import clean_env

DEMO_LOG = str(REPO / "examples" / "demo-node.log")


@pytest.mark.parametrize(
    ("argv", "env", "named", "accepted"),
    [
        (["--max-frame-bytes", "0", "replay", DEMO_LOG], {}, "--max-frame-bytes", "1 or more"),
        (
            ["replay", DEMO_LOG],
            {"DATAPLANE_MAX_FRAME_BYTES": "-5"},
            "DATAPLANE_MAX_FRAME_BYTES",
            "1 or more",
        ),
        (["--liveness-deadline", "nan", "version"], {}, "--liveness-deadline", "more than 0"),
        (
            ["--ready-quarantine-grace", "-1", "version"],
            {},
            "--ready-quarantine-grace",
            "0 or more",
        ),
        (
            ["version"],
            {"DATAPLANE_POLICY_COUNTERS_INTERVAL": "inf"},
            "DATAPLANE_POLICY_COUNTERS_INTERVAL",
            "seconds",
        ),
        (["--kubernetes-grace", "-3", "version"], {}, "--kubernetes-grace", "0 or more"),
        (["--hns-refresh-rate", "fast", "version"], {}, "--hns-refresh-rate", "calls a second"),
        (["--listen", "10.0.0.999:9", "version"], {}, "--listen", "HOST:PORT"),
        (["version"], {"DATAPLANE_LISTEN": "localhost"}, "DATAPLANE_LISTEN", "HOST:PORT"),
        (["show", "--address", "foo"], {}, "--address", "HOST:PORT"),
        (
            ["explain", "--from", "10.0.0.1", "--to", "10.0.0.2", "--proto", "tcp", "--port", "0"],
            {},
            "--port",
            "1 or more",
        ),
        (
            ["--endpoint-status-prefix", "relative", "version"],
            {},
            "--endpoint-status-prefix",
            "absolute",
        ),
        (["--log-level", "loud", "version"], {}, "--log-level", "'loud': expected one of DEBUG"),
        (["--host-address", "10.0.0.999", "version"], {}, "--host-address", "an IP address"),
        (
            ["version"],
            {"DATAPLANE_HOST_ADDRESS": "10.0.0.1,nope"},
            "DATAPLANE_HOST_ADDRESS",
            "'nope'",
        ),
        (["--chain-prefix", "a b", "version"], {}, "--chain-prefix", "1-8 letters"),
    ],
)
def test_a_bad_value_is_one_line_and_exit_2(
    argv: list[str],
    env: dict[str, str],
    named: str,
    accepted: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv, clean_env(**env))
    assert exited.value.code == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err
    assert named in last and accepted in last, last


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--platform", "SIM", "version"], {}),
        (["version"], {"DATAPLANE_LOG_LEVEL": "debug"}),
        (["--nftables-mode", "Enabled", "--log-format", "JSON", "version"], {}),
        (["version"], {"DATAPLANE_FELIX_RELEASE": "V3.31"}),
    ],
)
def test_enumerations_take_any_case_as_felix_s_do(argv: list[str], env: dict[str, str]) -> None:
    assert cli.main(argv, clean_env(**env)) == 0


@pytest.mark.parametrize("table", [False, True])
def test_a_reader_that_goes_away_is_no_traceback(table: bool, tmp_path: Path) -> None:
    """``show | head -1``: the exit a shell gives a process SIGPIPE ended."""
    big = tmp_path / "big.log"  # more output than a pipe holds
    sets = [pb.IPSetUpdate(id=f"s:set-{i}", members=["10.65.0.1"]) for i in range(3000)]
    write_log(big, [*sets, pb.InSync()])
    show = [sys.executable, "-m", "dataplane", "show", "--log", str(big)]
    with subprocess.Popen(
        [*show, *([] if table else ["--json"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=clean_env(),
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()  # the reader goes away after one line
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=60)
    assert code == cli.EXIT_READER_GONE, err
    assert "Traceback" not in err


def test_global_options_are_accepted_after_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["replay", DEMO_LOG, "--platform", "sim", "--log-level", "error"], {}) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        cli.main(["show", "--log", DEMO_LOG, "--max-frame-bytes", "0"], {})
    assert exited.value.code == 2
    assert "argument --max-frame-bytes: '0'" in capsys.readouterr().err


def test_show_kind_is_one_of_the_kinds_it_shows(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["show", "--log", DEMO_LOG, "--kind", "ipsets"], {})
    err = capsys.readouterr().err
    assert "'ipsets': expected one of workload_endpoint," in err and "hns_endpoint" in err
    assert cli.main(["show", "--log", DEMO_LOG, "--kind", "IPSET"], {}) == 0
    assert "ipset (6)" in capsys.readouterr().out


def test_show_reads_a_log_on_standard_input() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "dataplane", "show", "--log", "-", "--kind", "ipset", "--json"],
        input=Path(DEMO_LOG).read_bytes(),
        capture_output=True,
        cwd=REPO,
        env=clean_env(),
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert {o["kind"] for o in json.loads(shown.stdout)["objects"]} == {"ipset"}


def test_one_object_is_one_object(tmp_path: Path) -> None:
    log = tmp_path / "one.log"
    write_log(log, [pb.IPSetUpdate(id="s:one", members=["10.65.0.1"]), pb.InSync()])
    shown = subprocess.run(
        [sys.executable, "-m", "dataplane", "show", "--log", str(log)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=clean_env(),
        check=True,
    )
    assert shown.stdout.splitlines()[-1] == "1 object: 0 error, 0 pending"


def test_cleanup_says_it_removes_our_nftables_tables_too(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        cli.main(["cleanup", "--help"], {})
    assert "nftables table" in " ".join(capsys.readouterr().out.split())
