"""The package is typed (py.typed): mypy --strict finds nothing in it."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")


def test_mypy_strict() -> None:
    src = Path(__file__).resolve().parents[1] / "src" / "flexinfer_gateway"
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(src.parents[1] / "pyproject.toml"), "--no-incremental", str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
