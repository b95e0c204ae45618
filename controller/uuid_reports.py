"""Telling operators about device uuids published by more than one device.

Both allocators (the DRA controller over ResourceSlices, the legacy extender
over HAMi's register annotations) stay safe when uuids repeat: a device is
known by its node and uuid. What needs a person is the GPU discovery behind it
(a shared mock file, a cloned VM, a bad NVML answer), so each newly affected
node gets one warning event, and the process logs one line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from controller.decide import bounded_message
from controller.inventory import duplicate_uuid_notes
from dra_driver.kube.events import WARNING, EventRecorder, involved_object

log = logging.getLogger(__name__)

DUPLICATE_UUID = "DuplicateDeviceUUID"
"""The reason of the Warning event on each node whose devices share a uuid."""


def report_duplicate_uuids(
    recorder: EventRecorder | None,
    current: Mapping[str, tuple[str, ...]],
    previous: Mapping[str, tuple[str, ...]],
    node_of: Callable[[str], Mapping[str, Any] | None],
) -> None:
    """A warning and a node event for what changed between `previous` and `current`
    (uuid -> the node of each device publishing it); nothing when nothing is new.
    Without a recorder (a process that writes no events) only the log line."""
    notes = duplicate_uuid_notes(current, previous)
    if not notes:
        return
    log.warning(
        "device uuids published by more than one device",
        extra={"uuids": len(current), "nodes": sorted(notes)[:20]},
    )
    if recorder is None:
        return
    for name, note in notes.items():
        node = node_of(name) or {"metadata": {"name": name}}
        recorder.emit(
            involved_object(node, "Node", "v1"), WARNING, DUPLICATE_UUID, bounded_message(note)
        )
