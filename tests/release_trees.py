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

import json
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
UPGRADE_FIXTURES = Path("tests/fixtures/upgrade")


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
    """The commit `tag` (or any revision) names; ReleaseTreeError where git or it is missing."""
    found = subprocess.run(
        [_git(), "-C", str(repository), "rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        raise ReleaseTreeError(f"{repository} has no {tag} (a shallow clone?)")
    return found.stdout.strip()


def recorded_commits(repository: Path = REPOSITORY) -> dict[Version, str]:
    """Each recorded release's commit, as its upgrade fixtures' manifest names it: the
    release can be had from the history of a clone that did not fetch its tag."""
    found = {}
    for manifest in (repository / UPGRADE_FIXTURES).glob("*/manifest.json"):
        try:
            found[Version(manifest.parent.name)] = str(json.loads(manifest.read_text())["commit"])
        except (InvalidVersion, ValueError, KeyError):
            continue
    return found


def release_revision(version: str, repository: Path = REPOSITORY) -> str:
    """The revision holding a release: its tag `v<version>`, else the commit its fixtures
    were recorded from; ReleaseTreeError when the clone has neither."""
    tag = f"v{version}"
    try:
        tag_commit(tag, repository)
        return tag
    except ReleaseTreeError as missing:
        commit = recorded_commits(repository).get(Version(version))
        if commit is None:
            raise
        try:
            return tag_commit(commit, repository)
        except ReleaseTreeError:
            raise ReleaseTreeError(f"{missing}; nor the recorded commit {commit}") from None


def previous_release_tag(repository: Path = REPOSITORY) -> str:
    """The revision of the newest release below the working tree's version (by its
    `v<version>` tags and the recorded releases): the release a rolling upgrade to this
    tree starts from."""
    current = Version(release_version(repository))
    listed = subprocess.run(
        [_git(), "-C", str(repository), "tag", "--list", "v*"],
        capture_output=True,
        text=True,
        check=False,
    )
    versions = set(recorded_commits(repository))
    for tag in listed.stdout.split() if listed.returncode == 0 else ():
        try:
            versions.add(Version(tag.removeprefix("v")))
        except InvalidVersion:
            continue
    older = [version for version in versions if version < current]
    if not older:
        raise ReleaseTreeError(f"{repository} has no release below {current}")
    return release_revision(str(max(older)), repository)


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
