"""Shared helpers: the repository root and the `credit` command line the package is checked against."""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _cli() -> str:
    if os.environ.get("CREDIT_BIN"):
        return os.environ["CREDIT_BIN"]
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--no-deps"],
            cwd=ROOT, check=True, capture_output=True, text=True,
        ).stdout
    )
    binary = Path(meta["target_directory"]) / "debug" / "credit"
    if not binary.exists():
        subprocess.run(["cargo", "build", "--locked", "--bin", "credit"], cwd=ROOT, check=True)
    return str(binary)


@pytest.fixture(scope="session")
def cli():
    binary = _cli()

    def run(*args, check=True):
        # From an empty folder, so that no credit.toml changes the defaults.
        out = subprocess.run([binary, *map(str, args)], cwd=os.environ.get("TMPDIR", "/tmp"),
                             capture_output=True, text=True)
        if check and out.returncode != 0:
            raise AssertionError(f"credit {' '.join(map(str, args))} failed:\n{out.stderr}")
        return out

    return run
