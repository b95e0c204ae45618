"""XID events from a fake NVML module: critical ones are reported, app faults are not."""

from __future__ import annotations

import threading
import types

from kubeletplugin.xid import XID_CRITICAL_ERROR, XidWatcher


class NvmlError(Exception):
    pass


class NvmlTimeoutError(NvmlError):
    pass


def fake_nvml(events: list, unsupported: set[int]) -> types.ModuleType:
    module = types.ModuleType("pynvml")
    module.NVMLError = NvmlError
    module.NVMLError_Timeout = NvmlTimeoutError
    handles = [object(), object(), object()]
    module.handles = handles
    module.calls = []
    module.nvmlInit = lambda: module.calls.append("init")
    module.nvmlShutdown = lambda: module.calls.append("shutdown")
    module.nvmlEventSetCreate = lambda: "set"
    module.nvmlEventSetFree = lambda s: module.calls.append("free")
    module.nvmlDeviceGetCount = lambda: len(handles)
    module.nvmlDeviceGetHandleByIndex = lambda i: handles[i]
    module.nvmlDeviceGetUUID = lambda h: f"GPU-{handles.index(h)}".encode()

    def register(handle, kind, event_set):
        if handles.index(handle) in unsupported:
            raise NvmlError("not supported")
        assert (kind, event_set) == (XID_CRITICAL_ERROR, "set")

    module.nvmlDeviceRegisterEvents = register
    module.stop = threading.Event()

    def wait(event_set, timeout_ms):
        if not events:
            module.stop.set()
            raise NvmlTimeoutError()
        if isinstance(events[0], Exception):
            raise events.pop(0)
        index, kind, xid = events.pop(0)
        return types.SimpleNamespace(device=handles[index], eventType=kind, eventData=xid)

    module.nvmlEventSetWait_v2 = wait
    return module


def no_wait_failure(uuids, error):
    raise AssertionError(f"unexpected failed wait: {error}")


def test_critical_xids_are_reported_and_application_faults_ignored():
    events = [
        (0, XID_CRITICAL_ERROR, 79),
        (1, XID_CRITICAL_ERROR, 13),
        (1, 0x4, 48),
        (2, XID_CRITICAL_ERROR, 48),
    ]
    nvml = fake_nvml(events, unsupported={2})
    seen: list[tuple[str, int]] = []
    XidWatcher(nvml, lambda uuid, xid: seen.append((uuid, xid)), no_wait_failure).run(nvml.stop)
    assert seen == [("GPU-0", 79), ("GPU-2", 48)]
    assert nvml.calls == ["init", "free", "shutdown"]


def test_stop_request_ends_the_loop():
    nvml = fake_nvml([], unsupported=set())
    stop = threading.Event()
    stop.set()
    XidWatcher(nvml, lambda uuid, xid: None, no_wait_failure).run(stop)
    assert nvml.calls == ["init", "free", "shutdown"]


def test_a_failed_wait_reports_every_watched_gpu_and_the_loop_goes_on():
    events = [NvmlError("GPU is lost"), (0, XID_CRITICAL_ERROR, 79)]
    nvml = fake_nvml(events, unsupported={2})
    failures: list[tuple[tuple[str, ...], str]] = []
    seen: list[tuple[str, int]] = []
    watcher = XidWatcher(
        nvml,
        lambda uuid, xid: seen.append((uuid, xid)),
        lambda uuids, error: failures.append((tuple(uuids), error)),
        wait_ms=0,
    )
    watcher.run(nvml.stop)
    assert failures == [(("GPU-0", "GPU-1"), "GPU is lost")]
    assert seen == [("GPU-0", 79)]
    assert nvml.calls == ["init", "free", "shutdown"]
