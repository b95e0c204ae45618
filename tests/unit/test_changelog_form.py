"""CHANGELOG.md stays in Keep a Changelog's form, so that a reader (or a release
script) finds what changed, and whether it breaks anything, where the form puts it:
`## [Unreleased]` first, then `## [X.Y.Z] - YYYY-MM-DD` newest first, change types
only from Keep a Changelog's six, breaking lines marked with a `**Breaking:**`
prefix, and no dated release newer than the package being built. The checker is
run on the real file and on broken samples, so each rule is seen to catch its case.
"""

from __future__ import annotations

import itertools
import re
import tomllib
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = ROOT / "CHANGELOG.md"
PYPROJECT = ROOT / "pyproject.toml"

CHANGE_TYPES = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
"""Keep a Changelog 1.1.0's types, in the order a section lists them."""
UNRELEASED = "## [Unreleased]"
BREAKING = "**Breaking:**"
_RELEASE = re.compile(r"## \[(?P<version>\d+\.\d+\.\d+)\] - (?P<date>\d{4}-\d{2}-\d{2})")
_BREAKING_LIKE = re.compile(r"^\s*[-*]\s+\W*breaking\W*:", re.IGNORECASE)


@dataclass
class _Section:
    heading: str
    version: Version | None
    released: date | None
    types: list[str] = field(default_factory=list)
    entries: dict[str, int] = field(default_factory=dict)


def package_version() -> str:
    return tomllib.loads(PYPROJECT.read_text())["project"]["version"]


def changelog_problems(text: str, version: str) -> list[str]:
    """Every way `text` breaks the form, as messages naming the line; [] when in form."""
    problems: list[str] = []
    lines = text.splitlines()
    if not lines or lines[0] != "# Changelog":
        problems.append("line 1: the file must start with '# Changelog'")
    sections: list[_Section] = []
    current_type: str | None = None
    for number, line in enumerate(lines[1:], start=2):
        where = f"line {number}"
        if line.startswith("#"):
            current_type = _heading(line, where, sections, problems)
            continue
        if not sections:
            continue
        if BREAKING in line and not re.match(r"- \*\*Breaking:\*\* \S", line):
            problems.append(f"{where}: {BREAKING} only opens an entry ('- {BREAKING} ...')")
        elif _BREAKING_LIKE.match(line) and not line.startswith(f"- {BREAKING}"):
            problems.append(f"{where}: a breaking entry starts with exactly '- {BREAKING}'")
        if line.startswith("- "):
            if current_type is None:
                problems.append(f"{where}: entry outside a change type (### Added, ...)")
            else:
                entries = sections[-1].entries
                entries[current_type] = entries.get(current_type, 0) + 1
    problems += _section_problems(sections)
    problems += _version_problems(sections, Version(version))
    return problems


def _heading(line: str, where: str, sections: list[_Section], problems: list[str]) -> str | None:
    """Record a `##`/`###` heading; returns the change type now open (None when none is)."""
    if line.startswith("## "):
        match = _RELEASE.fullmatch(line)
        if line == UNRELEASED:
            if sections:
                problems.append(f"{where}: {UNRELEASED} must be the first section, and once")
            sections.append(_Section(line, None, None))
        elif match is None:
            problems.append(f"{where}: {line!r} is neither {UNRELEASED} nor '## [X.Y.Z] - Y-M-D'")
        else:
            if not sections:
                problems.append(f"{where}: the first section must be {UNRELEASED}")
            try:
                released = date.fromisoformat(match["date"])
            except ValueError:
                problems.append(f"{where}: {match['date']!r} is not a calendar date")
                released = None
            sections.append(_Section(line, Version(match["version"]), released))
        return None
    if line.startswith("### "):
        name = line[4:]
        if not sections:
            problems.append(f"{where}: {line!r} comes before any release section")
            return None
        section = sections[-1]
        if name not in CHANGE_TYPES:
            problems.append(f"{where}: {name!r} is not one of {', '.join(CHANGE_TYPES)}")
            return None
        if name in section.types:
            problems.append(f"{where}: {name!r} appears twice in {section.heading!r}")
        elif section.types and CHANGE_TYPES.index(name) < CHANGE_TYPES.index(section.types[-1]):
            problems.append(f"{where}: {name!r} must come before {section.types[-1]!r}")
        section.types.append(name)
        return name
    problems.append(f"{where}: {line!r}: only '#', '##' and '###' headings belong here")
    return None


def _section_problems(sections: list[_Section]) -> list[str]:
    problems: list[str] = []
    for section in sections:
        for name in section.types:
            if not section.entries.get(name):
                problems.append(f"{section.heading!r}: '### {name}' has no entry")
        if section.version is not None and not section.types:
            problems.append(f"{section.heading!r}: a release lists at least one change")
    if not sections or sections[0].heading != UNRELEASED:
        problems.append(f"no {UNRELEASED} section first")
    released = [s for s in sections if s.version is not None]
    for newer, older in itertools.pairwise(released):
        if (
            newer.version is not None
            and older.version is not None
            and newer.version <= older.version
        ):
            problems.append(f"{older.heading!r} must come after {newer.heading!r}")
        if newer.released and older.released and newer.released < older.released:
            problems.append(f"{newer.heading!r} is dated before {older.heading!r}")
    return problems


def _version_problems(sections: list[_Section], package: Version) -> list[str]:
    released = [s.version for s in sections if s.version is not None]
    if not released:
        return []
    newest = released[0]
    if newest > package:
        return [f"released {newest} is newer than the package version {package} (pyproject.toml)"]
    is_release = not (package.is_prerelease or package.is_devrelease or package.is_postrelease)
    if is_release and newest != package:
        return [f"the package version {package} is a release without its dated section"]
    return []


def test_the_changelog_is_in_form_for_the_package_version():
    assert changelog_problems(CHANGELOG.read_text(), package_version()) == []


def test_the_first_release_is_0_1_0_of_its_tag_date():
    text = CHANGELOG.read_text()
    releases = [m.groups() for m in _RELEASE.finditer(text)]
    assert releases[-1] == ("0.1.0", "2026-12-05")
    assert text.index(UNRELEASED) < text.index("## [0.1.0]")


GOOD = """# Changelog

## [Unreleased]

### Added

- a new flag

## [0.2.0] - 2027-01-10

### Changed

- **Breaking:** the checkpoint is version 2

### Fixed

- a fix

## [0.1.0] - 2026-12-05

### Added

- the first release
"""


def _with(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


def test_a_sample_in_form_has_no_problem():
    assert changelog_problems(GOOD, "0.3.0.dev0") == []
    assert changelog_problems(GOOD, "0.2.0") == []


@pytest.mark.parametrize(
    ("text", "version", "problem"),
    [
        (_with("# Changelog", "# Changes"), "0.3.0.dev0", "start with '# Changelog'"),
        (_with("## [Unreleased]\n", ""), "0.3.0.dev0", f"first section must be {UNRELEASED}"),
        (GOOD + "\n## [Unreleased]\n", "0.3.0.dev0", "must be the first section"),
        (_with("## [0.1.0] - 2026-12-05", "## [0.3.0] - 2026-12-05"), "0.4.0.dev0", "must come"),
        (_with("## [0.2.0] - 2027-01-10", "## [0.2.0] - 2026-11-01"), "0.3.0.dev0", "dated before"),
        (_with("2027-01-10", "2027-02-30"), "0.3.0.dev0", "not a calendar date"),
        (_with("## [0.2.0] - 2027-01-10", "## 0.2.0 (2027-01-10)"), "0.3.0.dev0", "neither"),
        (_with("### Fixed", "### Improvements"), "0.3.0.dev0", "'Improvements' is not one of"),
        (_with("### Fixed", "### Added"), "0.3.0.dev0", "'Added' must come before 'Changed'"),
        (_with("### Fixed", "#### Fixed"), "0.3.0.dev0", "only '#', '##' and '###'"),
        (_with("- a fix", "- a fix, **Breaking:** too"), "0.3.0.dev0", "only opens an entry"),
        (_with("- a fix", "- Breaking: a fix"), "0.3.0.dev0", "starts with exactly"),
        (_with("### Added\n\n- a new flag", "- a new flag"), "0.3.0.dev0", "outside a change"),
        (_with("- the first release", ""), "0.3.0.dev0", "has no entry"),
        (GOOD, "0.2.0.dev0", "released 0.2.0 is newer than the package version 0.2.0.dev0"),
        (GOOD, "0.3.0", "0.3.0 is a release without its dated section"),
    ],
)
def test_each_rule_catches_its_case(text: str, version: str, problem: str):
    problems = changelog_problems(text, version)
    assert any(problem in found for found in problems), problems
