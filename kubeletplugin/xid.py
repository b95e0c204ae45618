"""GPU health from NVML XID events.

A blocking loop (run in a worker thread) waits on an NVML event set for
critical XID errors and reports `(uuid, xid)`; XIDs that only mean an
application fault (the NVIDIA device plugin's default skip list) are ignored.
When the wait itself fails, nothing about the GPUs' health can be known any
more, so every watched GPU is reported lost, as NVIDIA's device plugin marks
all its devices unhealthy then; the loop keeps waiting.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from libvgpu.host_gpus import nvml_text

log = logging.getLogger(__name__)

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""Graphics engine exception, MMU fault, reset channel, preemptive cleanup,
video processor exception, context switch timeout: the workload's fault, not
the GPU's."""

XID_CRITICAL_ERROR = 0x0000000000000008
"""nvmlEventTypeXidCriticalError."""


@dataclass(slots=True)
class XidWatcher:
    """Reports critical XIDs of every GPU that supports event registration."""

    nvml: Any
    on_xid: Callable[[str, int], None]
    on_wait_failed: Callable[[Sequence[str], str], None]
    """Called with every watched GPU and the error when waiting for events failed."""

    wait_ms: int = 1000
    """Each wait on the event set; how soon a stop request is noticed, and the pause
    after a failed wait before the next."""

    def run(self, stop: threading.Event) -> None:
        nvml = self.nvml
        nvml.nvmlInit()
        try:
            events = nvml.nvmlEventSetCreate()
            try:
                uuids = self._register(events)
                while not stop.is_set():
                    try:
                        data = nvml.nvmlEventSetWait_v2(events, self.wait_ms)
                    except nvml.NVMLError_Timeout:
                        continue
                    except nvml.NVMLError as error:
                        log.warning("waiting for XID events failed", extra={"error": str(error)})
                        self.on_wait_failed(tuple(uuids.values()), str(error))
                        stop.wait(self.wait_ms / 1000)
                        continue
                    xid = int(data.eventData)
                    if data.eventType != XID_CRITICAL_ERROR or xid in APPLICATION_XIDS:
                        continue
                    uuid = uuids.get(id(data.device)) or nvml_text(
                        nvml.nvmlDeviceGetUUID(data.device)
                    )
                    log.warning("critical XID", extra={"gpu": uuid, "xid": xid})
                    self.on_xid(uuid, xid)
            finally:
                nvml.nvmlEventSetFree(events)
        finally:
            nvml.nvmlShutdown()

    def _register(self, events: Any) -> dict[int, str]:
        nvml = self.nvml
        uuids = {}
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = nvml_text(nvml.nvmlDeviceGetUUID(handle))
            try:
                nvml.nvmlDeviceRegisterEvents(handle, XID_CRITICAL_ERROR, events)
            except nvml.NVMLError as error:
                log.info("no XID events for this GPU", extra={"gpu": uuid, "error": str(error)})
                continue
            uuids[id(handle)] = uuid
        return uuids
