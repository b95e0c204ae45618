"""`dra-driver --version`, run as the installed console script: one line naming the release
pyproject.toml declares, the commit the build recorded and the Python it runs on; exit 0."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from dra_driver.version import COMMIT_ENV

ROOT = Path(__file__).resolve().parents[2]
CONSOLE_SCRIPT = Path(sys.executable).parent / "dra-driver"
COMMIT = "0773795" + "b" * 33


def test_version_prints_the_release_commit_and_python_on_one_line(tmp_path: Path) -> None:
    with (ROOT / "pyproject.toml").open("rb") as pyproject:
        version = tomllib.load(pyproject)["project"]["version"]
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), "--version"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "40", COMMIT_ENV: COMMIT},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    python = ".".join(map(str, sys.version_info[:3]))
    assert (done.returncode, done.stderr) == (0, "")
    # Not wrapped at the terminal's width (40 columns here), as argparse wraps help text.
    assert done.stdout == f"dra-driver {version} (commit {COMMIT}, python {python})\n"
