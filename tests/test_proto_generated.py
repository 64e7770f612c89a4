"""The committed generated code is what `make proto` produces from proto/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_generated_code_is_current(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{REPO / 'proto'}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            str(REPO / "proto" / "felixbackend.proto"),
        ],
        check=True,
    )
    for name in ("felixbackend_pb2.py", "felixbackend_pb2.pyi"):
        committed = (REPO / "dataplane" / "wire" / "_pb" / name).read_text()
        assert (tmp_path / name).read_text() == committed, f"{name} is stale: run `make proto`"
