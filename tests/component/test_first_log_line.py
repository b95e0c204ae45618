"""Each long-running component's first log line names it, its release and its commit, even
with the log level turned down to ERROR: the line a reader of a node's or the controller's
log looks for in the middle of a rolling upgrade.

Each command runs as `dra-driver <command>` in a process of its own, pointed at a
kubeconfig that does not exist, so it ends (or is killed) right after its first line,
before it touches anything on this machine.
"""

from __future__ import annotations

import asyncio
import re
import sys
import tomllib
from pathlib import Path

import pytest

from dra_driver.version import COMMIT_ENV

ROOT = Path(__file__).resolve().parents[2]
COMMIT = "0773795" + "c" * 33
WAIT_S = 60.0
"""Bounds only a broken command that never logs; a working one logs at once."""

LINE = re.compile(
    r"^\S+ \S+ INFO dra_driver\.process\.runtime starting "
    r"commit='(?P<commit>[^']*)' component='(?P<component>[^']*)' "
    r"python='(?P<python>[^']*)' version='(?P<version>[^']*)'$"
)
NODE_ARGS = ("--node-name", "node-a")
COMPONENTS = {
    "kubelet-plugin": NODE_ARGS,
    "device-plugin": NODE_ARGS,
    "controller": (),
    "extender": (),
    "scheduler": (),
    "webhook": (),
    "monitor": (),
}


def pyproject_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as pyproject:
        return str(tomllib.load(pyproject)["project"]["version"])


async def first_stderr_line(tmp_path: Path, *argv: str) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dra_driver.cli",
        *argv,
        "--kubeconfig",
        str(tmp_path / "missing-kubeconfig"),
        "--log-level",
        "ERROR",
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", COMMIT_ENV: COMMIT},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        async with asyncio.timeout(WAIT_S):
            line = await process.stderr.readline()
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
    return line.decode().rstrip("\n")


@pytest.mark.parametrize("component", sorted(COMPONENTS))
async def test_the_first_line_names_the_component_its_release_and_commit(
    tmp_path: Path, component: str
) -> None:
    line = await first_stderr_line(tmp_path, component, *COMPONENTS[component])
    found = LINE.match(line)
    assert found is not None, line
    assert found["component"] == component
    assert found["version"] == pyproject_version()
    assert found["commit"] == COMMIT
    assert found["python"] == ".".join(map(str, sys.version_info[:3]))
