"""Which release and which build this process runs: one answer for `dra-driver --version`,
each component's first log line, the `vgpu_build_info` series and the `version` of
`-o json` outputs.

The release is the installed package's metadata, so `pyproject.toml`'s `version` is the
one place a release is named. The commit is the one the image build recorded in
`VGPU_BUILD_COMMIT` (deploy/Dockerfile); else, for a checkout installed in place, the
source tree's git metadata, read as files: the image carries no git, and a component's
start should not fork a process to learn its own name. Otherwise it is `unknown`, never
an error: nothing the driver does depends on it. Imports nothing from Kubernetes, gRPC
or Prometheus, so the CLI and the pure layers can ask.
"""

from __future__ import annotations

import functools
import os
import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

DISTRIBUTION = "vgpu-dra-driver"
"""The name `pyproject.toml` installs the package under."""

COMMIT_ENV = "VGPU_BUILD_COMMIT"
"""Set by the image build (`--build-arg VGPU_BUILD_COMMIT=$(git rev-parse HEAD)`)."""

UNKNOWN = "unknown"

SOURCE_ROOT = Path(__file__).resolve().parents[1]
"""The checkout's root when the package runs from its source tree (an editable install);
an installed wheel's is site-packages, which has no `.git`."""

_OBJECT_NAME = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
"""A commit's full name: SHA-1 (40 hex digits) or SHA-256 (64)."""
_SYMBOLIC_REF = "ref: "
_MAX_REF_HOPS = 5
"""A symbolic ref names another ref (HEAD -> refs/heads/main); a loop stops here."""


@dataclass(frozen=True, slots=True)
class BuildInfo:
    version: str
    """The release, e.g. `0.2.0.dev0` (PEP 440, as pyproject.toml writes it)."""
    commit: str
    """The full commit name the build came from, or `unknown`."""
    python: str
    """The interpreter's version, e.g. `3.12.4`: the image's base decides it, not the code."""

    def describe(self) -> str:
        """`0.2.0.dev0 (commit 0773795..., python 3.12.4)`: what `--version` prints."""
        return f"{self.version} (commit {self.commit}, python {self.python})"

    def fields(self) -> dict[str, str]:
        """The release and commit as the top-level keys of a JSON or YAML report."""
        return {"version": self.version, "commit": self.commit}


@functools.cache
def build_info() -> BuildInfo:
    """This process's build, read once: neither the package nor the checkout changes
    under a running process in a way it should report."""
    return read_build_info(SOURCE_ROOT, os.environ)


def read_build_info(source_root: Path, environ: Mapping[str, str]) -> BuildInfo:
    return BuildInfo(
        version=package_version(),
        commit=build_commit(source_root, environ),
        python=platform.python_version(),
    )


def package_version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return UNKNOWN


def build_commit(source_root: Path, environ: Mapping[str, str]) -> str:
    """The image's recorded commit wins over the checkout's: an image built from a tree
    whose `.git` came along still names the commit it was built from."""
    recorded = environ.get(COMMIT_ENV, "").strip()
    if recorded:
        return recorded
    return git_commit(source_root) or UNKNOWN


def git_commit(source_root: Path) -> str | None:
    """The commit `source_root`'s checkout has out (HEAD, followed through its ref), or
    None where that cannot be read: no `.git`, a ref in a store this does not read
    (reftable), a file half-written by a running git."""
    try:
        git_dir = _git_dir(source_root / ".git")
        if git_dir is None:
            return None
        common_dir = _common_dir(git_dir)
        value = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
        for _ in range(_MAX_REF_HOPS):
            if not value.startswith(_SYMBOLIC_REF):
                return value if _OBJECT_NAME.fullmatch(value) else None
            found = _read_ref(value.removeprefix(_SYMBOLIC_REF).strip(), git_dir, common_dir)
            if found is None:
                return None
            value = found
    except (OSError, UnicodeDecodeError):
        return None
    return None


def _git_dir(dot_git: Path) -> Path | None:
    """`.git` itself, or where a worktree's or submodule's `.git` file points
    (`gitdir: <path>`, relative to the file's directory when not absolute)."""
    if dot_git.is_dir():
        return dot_git
    if not dot_git.is_file():
        return None
    text = dot_git.read_text(encoding="utf-8").strip()
    if not text.startswith("gitdir:"):
        return None
    return dot_git.parent / text.removeprefix("gitdir:").strip()


def _common_dir(git_dir: Path) -> Path:
    """A linked worktree keeps its own HEAD but shares the main repository's refs, named
    by its `commondir` file."""
    common = git_dir / "commondir"
    if not common.is_file():
        return git_dir
    return git_dir / common.read_text(encoding="utf-8").strip()


def _read_ref(name: str, git_dir: Path, common_dir: Path) -> str | None:
    """A ref's value: its loose file (the worktree's own first), else its `packed-refs`
    line (`<object name> <ref name>`; `#` headers and `^` peeled lines skipped)."""
    if not name.startswith("refs/"):
        return None
    for directory in (git_dir, common_dir):
        loose = directory / name
        if loose.is_file():
            return loose.read_text(encoding="utf-8").strip()
    packed = common_dir / "packed-refs"
    if not packed.is_file():
        return None
    for line in packed.read_text(encoding="utf-8").splitlines():
        if line.startswith(("#", "^")):
            continue
        object_name, _, ref_name = line.partition(" ")
        if ref_name.strip() == name:
            return object_name
    return None
