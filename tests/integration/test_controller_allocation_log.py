"""The controller's INFO line for an allocation answers "where is my claim": the node,
and per claim each device with its share id, as written in the claim's status."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from controller_cluster import (
    NAMESPACE,
    WAIT_S,
    capacity,
    cluster,
    controller,
    request,
    results,
)

from dra_driver.process.runtime import KeyValueFormatter

ALLOCATED = "claims allocated"


class _AllocationLines(logging.Handler):
    """Keeps the controller's allocation lines and wakes whoever waits for one."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == ALLOCATED:
            self.records.append(record)
            self.seen.set()


@contextmanager
def allocation_lines() -> Iterator[_AllocationLines]:
    logger = logging.getLogger("controller.allocation_writer")
    handler = _AllocationLines()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def test_the_allocation_log_line_names_node_devices_and_share_ids(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 0)
        await c.add_node("node-b", 2)
        await c.add_pod_with_claim(
            "train",
            request(**capacity(memory="10Gi")),
            request("more", count=2, **capacity(memory="5Gi")),
        )
        with allocation_lines() as lines:
            async with controller(c.client):
                [claim] = await c.wait_allocated("train-claim")
                async with asyncio.timeout(WAIT_S):
                    await lines.seen.wait()
    [record] = lines.records
    written = results(claim)
    assert len(written) == 3 and all(result["shareID"] for result in written)
    assert record.__dict__["pod"] == f"{NAMESPACE}/train"
    assert record.__dict__["node"] == "node-b"
    assert record.__dict__["claims"] == {
        f"{NAMESPACE}/train-claim": [
            f"node-b/{result['device']} share {result['shareID']}" for result in written
        ]
    }
    line = KeyValueFormatter("%(message)s").format(record)
    assert line.startswith(f"{ALLOCATED} ") and "node='node-b'" in line
    assert all(result["shareID"] in line for result in written)
