"""The build a process reports: the release from the package metadata, the commit from the
image's variable, else from a checkout's git files as git lays them out (a branch, packed
refs, a detached HEAD, a linked worktree), else `unknown`."""

from __future__ import annotations

import platform
import tomllib
from pathlib import Path

import pytest

from dra_driver.version import (
    COMMIT_ENV,
    UNKNOWN,
    BuildInfo,
    build_commit,
    build_info,
    git_commit,
    read_build_info,
)

ROOT = Path(__file__).resolve().parents[2]
MAIN = "0773795" + "a" * 33
BRANCH = "1" * 40
TAGGED = "2" * 40


def pyproject_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as pyproject:
        return str(tomllib.load(pyproject)["project"]["version"])


def git_dir(root: Path, head: str) -> Path:
    dot_git = root / ".git"
    (dot_git / "refs" / "heads").mkdir(parents=True)
    (dot_git / "HEAD").write_text(head + "\n")
    return dot_git


def test_a_branch_head_reads_its_loose_ref(tmp_path: Path) -> None:
    dot_git = git_dir(tmp_path, "ref: refs/heads/main")
    (dot_git / "refs" / "heads" / "main").write_text(MAIN + "\n")
    assert git_commit(tmp_path) == MAIN


def test_a_packed_branch_reads_its_packed_refs_line(tmp_path: Path) -> None:
    dot_git = git_dir(tmp_path, "ref: refs/heads/release")
    (dot_git / "packed-refs").write_text(
        "# pack-refs with: peeled fully-peeled sorted \n"
        f"{BRANCH} refs/heads/main\n"
        f"{MAIN} refs/heads/release\n"
        f"{TAGGED} refs/tags/v0.1.0\n"
        f"^{BRANCH}\n"
    )
    assert git_commit(tmp_path) == MAIN


def test_a_loose_ref_wins_over_its_stale_packed_line(tmp_path: Path) -> None:
    dot_git = git_dir(tmp_path, "ref: refs/heads/main")
    (dot_git / "packed-refs").write_text(f"{BRANCH} refs/heads/main\n")
    (dot_git / "refs" / "heads" / "main").write_text(MAIN + "\n")
    assert git_commit(tmp_path) == MAIN


def test_a_detached_head_is_the_commit_itself(tmp_path: Path) -> None:
    git_dir(tmp_path, MAIN)
    assert git_commit(tmp_path) == MAIN


def test_a_linked_worktree_reads_its_own_head_and_the_shared_refs(tmp_path: Path) -> None:
    main = git_dir(tmp_path / "main", "ref: refs/heads/main")
    (main / "packed-refs").write_text(f"{BRANCH} refs/heads/feature\n")
    linked = main / "worktrees" / "feature"
    linked.mkdir(parents=True)
    (linked / "HEAD").write_text("ref: refs/heads/feature\n")
    (linked / "commondir").write_text("../..\n")
    checkout = tmp_path / "feature"
    checkout.mkdir()
    (checkout / ".git").write_text(f"gitdir: {linked}\n")
    assert git_commit(checkout) == BRANCH


def test_a_relative_gitdir_is_read_from_the_git_files_directory(tmp_path: Path) -> None:
    (tmp_path / "modules" / "sub").mkdir(parents=True)
    (tmp_path / "modules" / "sub" / "HEAD").write_text(MAIN + "\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".git").write_text("gitdir: ../modules/sub\n")
    assert git_commit(tmp_path / "sub") == MAIN


@pytest.mark.parametrize(
    ("head", "why"),
    [
        ("ref: refs/heads/gone", "the branch has no commit yet"),
        ("ref: refs/heads/.invalid", "refs kept in a reftable"),
        ("not a commit", "HEAD holds garbage"),
        ("", "HEAD is empty (half-written)"),
        ("ref: ../../outside", "a ref outside refs/"),
    ],
)
def test_what_cannot_be_read_is_no_commit(tmp_path: Path, head: str, why: str) -> None:
    git_dir(tmp_path, head)
    assert git_commit(tmp_path) is None, why


def test_a_ref_loop_ends(tmp_path: Path) -> None:
    dot_git = git_dir(tmp_path, "ref: refs/heads/a")
    (dot_git / "refs" / "heads" / "a").write_text("ref: refs/heads/b\n")
    (dot_git / "refs" / "heads" / "b").write_text("ref: refs/heads/a\n")
    assert git_commit(tmp_path) is None


def test_no_checkout_is_unknown(tmp_path: Path) -> None:
    assert git_commit(tmp_path) is None
    assert build_commit(tmp_path, {}) == UNKNOWN
    (tmp_path / ".git").write_text("not a gitdir line\n")
    assert build_commit(tmp_path, {}) == UNKNOWN


def test_the_image_builds_commit_wins_over_the_checkouts(tmp_path: Path) -> None:
    git_dir(tmp_path, MAIN)
    assert build_commit(tmp_path, {COMMIT_ENV: f" {BRANCH}\n"}) == BRANCH
    assert build_commit(tmp_path, {COMMIT_ENV: ""}) == MAIN


def test_the_release_is_pyprojects_version(tmp_path: Path) -> None:
    info = read_build_info(tmp_path, {COMMIT_ENV: MAIN})
    assert info == BuildInfo(pyproject_version(), MAIN, platform.python_version())
    assert info.describe() == f"{info.version} (commit {MAIN}, python {info.python})"
    assert info.fields() == {"version": info.version, "commit": MAIN}


def test_this_process_reads_its_build_once() -> None:
    assert build_info() is build_info()
    assert build_info().version == pyproject_version()
