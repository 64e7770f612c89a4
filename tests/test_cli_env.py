"""The command line as Felix meets it: no arguments, so DATAPLANE_* variables.

Every option also reads DATAPLANE_<OPTION>; the command line wins; a bad
value is one line naming the variable, exit 2. And the ways to start it
(``dataplane-driver``, ``python -m dataplane``, ``driver.py``) agree.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dataplane import cli
from dataplane.cli.options import ENV_PREFIX, GLOBAL_OPTIONS
from dataplane.cli.parser import COMMANDS, build, parse_args
from dataplane.ops.address import ListenAddress
from tests.conftest import REPO

SCRIPT = Path(sys.executable).parent / "dataplane-driver"


def clean_env(**variables: str) -> dict[str, str]:
    """This environment without any DATAPLANE_* of the runner's, plus ``variables``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    return {**env, **variables}


def test_the_variable_of_an_option_is_its_name() -> None:
    names = {o.flag: o.env for o in GLOBAL_OPTIONS}
    assert names["--log-level"] == "DATAPLANE_LOG_LEVEL"
    assert names["--chain-prefix"] == "DATAPLANE_CHAIN_PREFIX"
    assert names["--host-address"] == "DATAPLANE_HOST_ADDRESS"
    assert names["--felix-release"] == "DATAPLANE_FELIX_RELEASE"


def test_every_variable_takes_effect() -> None:
    environ = {
        "DATAPLANE_LOG_LEVEL": "DEBUG",
        "DATAPLANE_MAX_FRAME_BYTES": "1024",
        "DATAPLANE_PLATFORM": "sim",
        "DATAPLANE_HNS_FAKE": "/tmp/host.json",
        "DATAPLANE_LB_STATE": "/tmp/lb.json",
        "DATAPLANE_HOST_ADDRESS": "10.0.0.1, fd00::1",
        "DATAPLANE_HNS_REFRESH_RATE": "2.5",
        "DATAPLANE_CHAIN_PREFIX": "dp-",
        "DATAPLANE_SYSCTL_STATE": "/tmp/sysctls.json",
        "DATAPLANE_MTU_FILE": "/tmp/mtu",
        "DATAPLANE_RECORD": "/tmp/felix.log",
        "DATAPLANE_FELIX_RELEASE": "v3.31",
        "DATAPLANE_LISTEN": ":9095",
        "DATAPLANE_LIVENESS_DEADLINE": "30",
        "DATAPLANE_READY_QUARANTINE_GRACE": "2.5",
        "DATAPLANE_LOG_FORMAT": "json",
        "DATAPLANE_POLICY_COUNTERS_INTERVAL": "0",
        "DATAPLANE_NFTABLES_MODE": "enabled",
        "DATAPLANE_ENDPOINT_STATUS_PREFIX": "/run/test",
        "DATAPLANE_SERVICES_SOURCE": "kubernetes",
        "DATAPLANE_KUBECONFIG": "/tmp/kubeconfig",
        "DATAPLANE_NODE_NAME": "node-7",
        "DATAPLANE_KUBERNETES_GRACE": "15",
        "DATAPLANE_SEND_IN_SYNC": "yes",
    }
    assert len(environ) == len(GLOBAL_OPTIONS)  # one per option
    args = parse_args([], environ)
    assert args.log_level == "DEBUG"
    assert args.max_frame_bytes == 1024  # converted as the flag's would be
    assert args.platform == "sim"
    assert args.hns_refresh_rate == 2.5
    assert args.hns_fake == "/tmp/host.json"
    assert args.lb_state == "/tmp/lb.json"
    assert args.host_address == ["10.0.0.1", "fd00::1"]
    assert args.chain_prefix == "dp-"
    assert args.sysctl_state == "/tmp/sysctls.json"
    assert args.mtu_file == "/tmp/mtu"
    assert args.endpoint_status_prefix == "/run/test"
    assert args.kubernetes_grace == 15.0
    assert (args.services_source, args.kubeconfig, args.node_name) == (
        "kubernetes",
        "/tmp/kubeconfig",
        "node-7",
    )
    assert args.record == "/tmp/felix.log"
    assert args.felix_release == "v3.31"
    assert args.listen == ListenAddress("127.0.0.1", 9095)
    assert args.liveness_deadline == 30.0
    assert args.ready_quarantine_grace == 2.5
    assert args.log_format == "json"
    assert args.policy_counters_interval == 0.0
    assert args.nftables_mode == "enabled"
    assert args.send_in_sync == "yes"


def test_without_variables_the_defaults_hold() -> None:
    args = parse_args([], {"DATAPLANE_CHAIN_PREFIX": ""})  # empty counts as unset
    assert args.chain_prefix == "cali-"
    assert list(args.host_address) == []
    assert args.felix_release == "auto"
    assert args.log_level is None  # so LogSeverityScreen is followed
    assert args.send_in_sync == "no"  # no Felix release takes DataplaneInSync


def test_the_command_line_wins() -> None:
    environ = {
        "DATAPLANE_CHAIN_PREFIX": "env-",
        "DATAPLANE_HOST_ADDRESS": "10.0.0.1,10.0.0.2",
        "DATAPLANE_PLATFORM": "sim",
    }
    args = parse_args(
        ["--chain-prefix", "flag-", "--host-address", "10.9.9.9", "--host-address", "10.9.9.8"],
        environ,
    )
    assert args.chain_prefix == "flag-"
    assert args.host_address == ["10.9.9.9", "10.9.9.8"]  # replaced, not added to
    assert args.platform == "sim"  # not given on the command line: the variable's
    # A bad variable is no error when the command line overrides it.
    assert parse_args(["--log-level", "INFO"], {"DATAPLANE_LOG_LEVEL": "LOUD"}).log_level == (
        "INFO"
    )


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("DATAPLANE_LOG_LEVEL", "loud", "'loud': expected one of DEBUG, INFO, WARNING, ERROR"),
        ("DATAPLANE_MAX_FRAME_BYTES", "64MiB", "'64MiB': expected a whole number, 1 or more"),
        ("DATAPLANE_FELIX_RELEASE", "v2.0", "'v2.0': expected one of auto, v3.30,"),
    ],
)
def test_a_bad_variable_is_one_line_and_exit_2(
    name: str, value: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main([], {name: value})
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"dataplane-driver: error: environment variable {name}: {why}")


@pytest.mark.slow
def test_a_bad_variable_stops_the_process() -> None:
    result = subprocess.run(
        [str(SCRIPT)],
        capture_output=True,
        text=True,
        cwd="/",
        env=clean_env(DATAPLANE_PLATFORM="mars"),
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "dataplane-driver: error: environment variable DATAPLANE_PLATFORM: 'mars':"
        " expected one of auto, linux, windows, sim"
    ]


@pytest.mark.slow
def test_a_variable_reaches_the_running_driver(tmp_path: Path) -> None:
    # Replay reads --platform too: windows without a host file says so.
    result = subprocess.run(
        [str(SCRIPT), "replay", str(REPO / "examples/demo-node.log")],
        capture_output=True,
        text=True,
        cwd="/",
        env=clean_env(DATAPLANE_PLATFORM="windows"),
        check=False,
    )
    assert result.returncode == 1
    assert "--hns-fake FILE" in result.stderr


def test_help_names_every_variable_and_the_rule() -> None:
    text = build({}).format_help()
    for option in GLOBAL_OPTIONS:
        assert f"[env {option.env}]" in " ".join(text.split()), option.flag
    assert "command line wins" in text
    for name in COMMANDS:
        assert f"\n  {name} " in text  # the epilog names every command


@pytest.mark.slow
def test_help_of_the_console_script() -> None:
    text = subprocess.run(
        [str(SCRIPT), "--help"], capture_output=True, text=True, cwd="/", check=True
    ).stdout
    assert text.startswith("usage: dataplane-driver ")
    assert "DATAPLANE_CHAIN_PREFIX" in text and "--felix-release" in text


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        [str(SCRIPT), "--version"],
        [sys.executable, "-m", "dataplane", "--version"],
        [sys.executable, str(REPO / "driver.py"), "--version"],
    ],
    ids=["dataplane-driver", "python -m dataplane", "driver.py"],
)
def test_version_flag_is_the_version_command(command: list[str]) -> None:
    version = subprocess.run(
        [str(SCRIPT), "version"], capture_output=True, text=True, cwd="/", check=True
    ).stdout
    assert version.startswith("dataplane ")
    flag = subprocess.run(command, capture_output=True, text=True, cwd="/", check=True).stdout
    assert flag == version


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "prog"),
    [
        ([str(SCRIPT)], "dataplane-driver"),
        ([sys.executable, "-m", "dataplane"], "python -m dataplane"),
        ([sys.executable, str(REPO / "driver.py")], "driver.py"),
    ],
)
def test_messages_name_the_program_invoked(command: list[str], prog: str) -> None:
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd="/",
        stdin=subprocess.DEVNULL,
        close_fds=True,
        env=clean_env(),
        check=False,
    )
    assert result.returncode == 2  # no Felix pipes
    assert result.stderr.startswith(f"{prog}: fd 3 (input from Felix) is not open.")
    assert f"see '{prog} --help'" in result.stderr


def test_readme_command_line_block_matches_the_parser() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n## Command line\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    in_readme = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", block))

    def flags(command: str) -> set[str]:
        own = argparse.ArgumentParser(add_help=False)
        COMMANDS[command].add_arguments(own)
        return set(re.findall(r"--[a-z][a-z-]*", own.format_usage()))

    in_parser = {"--help", "--version", *(o.flag for o in GLOBAL_OPTIONS)}
    in_parser |= {flag for command in COMMANDS for flag in flags(command)}
    assert in_readme == in_parser
    commands = set(re.findall(r"^dataplane-driver (\w+)", block, re.M))
    assert commands == set(COMMANDS)
    for claim in ("DATAPLANE_", "dataplaneDriver", "python -m dataplane", "SIGTERM"):
        assert claim in section, claim


def test_the_configuration_reference_is_current() -> None:
    """docs/configuration.md is what the option table and Felix's keys say."""
    from dataplane.cli.reference import markdown  # noqa: PLC0415

    page = (REPO / "docs" / "configuration.md").read_text()
    assert page == markdown(), "run: python -m dataplane.cli.reference > docs/configuration.md"
    for option in GLOBAL_OPTIONS:
        assert f"`{option.flag}` | `{option.env}`" in page
