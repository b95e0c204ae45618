"""Suite-wide fixtures: every async test must leave no asyncio task behind, and
every CDI spec a test writes must apply the way a container runtime applies it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest
from cdi_applier import SpecWriteWatch
from hypothesis import settings
from rbac_audit_scope import order_audit_last

_SPEC_WATCH = SpecWriteWatch()
_SPEC_WATCH.install()

# Property tests explore new examples on every local run; CI replays a fixed sequence,
# so a landing is never decided by which random examples a run happened to draw. Neither
# has a per-example deadline: a machine busy with other work must not fail a test.
settings.register_profile("local", deadline=None)
settings.register_profile("ci", derandomize=True, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "local")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The RBAC audit reads what every other test made the components call: it runs last
    (after -k/-m deselection, hence trylast)."""
    order_audit_last(config, items)


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


@pytest.fixture(autouse=True)
def cdi_spec_watch() -> Iterator[SpecWriteWatch]:
    """Fail a test that writes a CDI spec a runtime could not apply (a device node
    or mount source missing on the host when the spec appeared). A test that
    writes one on purpose takes its problems with `take_problems()`."""
    _SPEC_WATCH.start()
    yield _SPEC_WATCH
    problems = _SPEC_WATCH.stop()
    assert not problems, f"CDI specs a runtime would refuse: {problems}"
