"""Suite-wide fixtures: every async test must leave no asyncio task behind."""

from __future__ import annotations

import asyncio

import pytest


@pytest.fixture(autouse=True)
async def _no_leaked_tasks():
    """Fail a test that leaves tasks running: a leaked task is a leaked resource."""
    before = asyncio.all_tasks()
    yield
    current = asyncio.current_task()
    leaked = [t for t in asyncio.all_tasks() - before if t is not current and not t.done()]
    for task in leaked:
        task.cancel()
    assert not leaked, f"test leaked asyncio tasks: {[t.get_name() for t in leaked]}"
