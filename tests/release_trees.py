"""A previous release's source tree, runnable beside the working tree's installed package.

The upgrade fixtures and the rolling-upgrade test run a release's own code: its tree comes
from the repository's history (`git archive <tag>`), and its components run as
`python -m dra_driver.cli ...` with the tree first on PYTHONPATH and as the working
directory. `dra-driver` finds its subcommands through the installed distribution's entry
points, and the installed one is the working tree's, whose subcommands an older tree may
lack; so the tree gets a `.dist-info` of its own, written from its `pyproject.toml`, which
importlib.metadata finds first on the path: the release runs as if it were installed.

Usable as a script: `python tests/release_trees.py v0.1.0 /tmp/v010`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.version import InvalidVersion, Version

REPOSITORY = Path(__file__).resolve().parents[1]
ENTRY_POINT_GROUP = "dra_driver.commands"


class ReleaseTreeError(RuntimeError):
    """The release's tree cannot be had here (no git, no such tag, not a repository)."""


def release_version(tree: Path) -> str:
    return str(_project(tree)["version"])


def _project(tree: Path) -> Mapping[str, object]:
    with (tree / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    return project  # type: ignore[no-any-return]


def _git() -> str:
    git = shutil.which("git")
    if git is None:
        raise ReleaseTreeError("git is not installed")
    return git


def tag_commit(tag: str, repository: Path = REPOSITORY) -> str:
    """The commit `tag` names; ReleaseTreeError where git or the tag is missing."""
    found = subprocess.run(
        [_git(), "-C", str(repository), "rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        raise ReleaseTreeError(f"{repository} has no tag {tag} (a shallow or tagless clone?)")
    return found.stdout.strip()


def previous_release_tag(repository: Path = REPOSITORY) -> str:
    """The newest `v<version>` tag below the working tree's version: the release a
    rolling upgrade to this tree starts from."""
    current = Version(release_version(repository))
    listed = subprocess.run(
        [_git(), "-C", str(repository), "tag", "--list", "v*"],
        capture_output=True,
        text=True,
        check=False,
    )
    versions = []
    for tag in listed.stdout.split():
        try:
            versions.append((Version(tag.removeprefix("v")), tag))
        except InvalidVersion:
            continue
    older = [(version, tag) for version, tag in versions if version < current]
    if listed.returncode != 0 or not older:
        raise ReleaseTreeError(f"{repository} has no release tag below {current}")
    return max(older)[1]


def extract_release(tag: str, destination: Path, repository: Path = REPOSITORY) -> Path:
    """`git archive <tag>` unpacked into `destination` (made empty first), with its
    distribution metadata; the tree's path."""
    commit = tag_commit(tag, repository)
    if destination.exists():
        shutil.rmtree(destination)
    destination.mkdir(parents=True)
    archive = subprocess.run(
        [_git(), "-C", str(repository), "archive", "--format=tar", commit],
        capture_output=True,
        check=True,
    )
    subprocess.run(
        ["tar", "-x", "-C", str(destination)], input=archive.stdout, capture_output=True, check=True
    )
    write_distribution_metadata(destination)
    return destination


def write_distribution_metadata(tree: Path) -> Path:
    """`<name>-<version>.dist-info` in the tree: METADATA and the tree's own entry points."""
    project = _project(tree)
    name = str(project["name"]).replace("-", "_")
    version = str(project["version"])
    for stale in tree.glob(f"{name}-*.dist-info"):
        shutil.rmtree(stale)
    info = tree / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {version}\n"
    )
    groups = project.get("entry-points") or {}
    lines = []
    for group, points in sorted(groups.items()):  # type: ignore[union-attr]
        lines.append(f"[{group}]")
        lines += [f"{key} = {value}" for key, value in sorted(points.items())]
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines))
    return info


def release_environment(tree: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment that runs the tree's code: its path first, nothing else of ours."""
    environment = dict(os.environ if base is None else base)
    environment["PYTHONPATH"] = str(tree)
    return environment


def release_command(*arguments: str) -> list[str]:
    """`dra-driver <arguments>` as a release tree runs it (with `release_environment` and
    the tree as the working directory, so no other `dra_driver` comes first)."""
    return [sys.executable, "-m", "dra_driver.cli", *arguments]


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        print("usage: release_trees.py <tag> <destination>", file=sys.stderr)
        return 2
    tree = extract_release(argv[0], Path(argv[1]))
    print(f"{argv[0]} ({tag_commit(argv[0])}, version {release_version(tree)}) in {tree}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
