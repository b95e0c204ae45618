"""What the session collected, for the RBAC audit: it judges the roles only after a run
that exercised every component (every integration and component test file)."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
AUDITED_SUITES = ("integration", "component")
AUDIT_FILE = TESTS / "integration" / "test_deploy_rbac_audit.py"

COLLECTED_FILES = pytest.StashKey[frozenset[Path]]()
"""Test files with at least one selected test in this session."""


def order_audit_last(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the audit's tests to the end and remember which files the session runs."""
    audit = [item for item in items if item.path == AUDIT_FILE]
    items[:] = [item for item in items if item.path != AUDIT_FILE] + audit
    config.stash[COLLECTED_FILES] = frozenset(item.path for item in items)


def missing_suite_files(config: pytest.Config) -> list[Path]:
    """The integration and component test files this session does not run."""
    collected = config.stash.get(COLLECTED_FILES, frozenset())
    expected = [
        path
        for suite in AUDITED_SUITES
        for path in sorted((TESTS / suite).glob("test_*.py"))
        if path != AUDIT_FILE
    ]
    return [path for path in expected if path not in collected]
