"""HAMi's own test values for its per-vendor backends, in HAMi's terms.

Each vendor test file writes its table of cases with these records, taking
the inputs and the expected outputs from HAMi's `pkg/device/<vendor>/*_test.go`
(commit 4707fb02), so that a difference from HAMi fails a test here. The
records use HAMi's field names (`DeviceUsage`, `ContainerDeviceRequest`) so a
reader can hold a case next to HAMi's test and compare it value by value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class HamiDevice:
    """HAMi's `DeviceUsage` as the tests write it: totals plus what is in use."""

    id: str
    index: int = 0
    used: int = 0
    count: int = 100
    usedmem: int = 0
    totalmem: int = 0
    totalcore: int = 0
    usedcores: int = 0
    numa: int = 0
    type: str = ""
    health: bool = True
    custom_info: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HamiRequest:
    """HAMi's `ContainerDeviceRequest` (`Nums`, `Type`, `Memreq`, `MemPercentagereq`,
    `Coresreq`); all zero is HAMi's "no request"."""

    nums: int = 0
    type: str = ""
    memreq: int = 0
    mempct: int = 0
    coresreq: int = 0


NO_REQUEST = HamiRequest()


@dataclass(frozen=True, slots=True)
class FitCase:
    """One row of a `TestDevices_Fit` table: devices in HAMi's order, the request,
    the pod annotations, and what Fit answers (fit, how many devices it holds
    at the end, the ids when it fits, and the reason string)."""

    name: str
    devices: tuple[HamiDevice, ...]
    request: HamiRequest
    fit: bool
    held: int
    ids: tuple[str, ...] = ()
    reason: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RequestCase:
    """One row of a `Test_GenerateResourceRequests` table: a container's
    resources (limits and requests, as quantity strings) and the request."""

    name: str
    limits: Mapping[str, str]
    requests: Mapping[str, str]
    want: HamiRequest


def container(limits: Mapping[str, str], requests: Mapping[str, str] | None = None) -> dict:
    """A container object carrying these resources."""
    resources: dict[str, Any] = {"limits": dict(limits)}
    if requests is not None:
        resources["requests"] = dict(requests)
    return {"name": "ctr", "resources": resources}


def slots_of(devices: tuple[HamiDevice, ...]) -> list:
    """HAMi's DeviceUsage list as the engine's slots, in the same order."""
    from dra_driver.engine.grants import Slot
    from dra_driver.engine.model import Device

    return [
        Slot(
            Device(
                id=d.id,
                index=d.index,
                type=d.type,
                count=d.count,
                memory_mib=d.totalmem,
                cores=d.totalcore,
                numa=d.numa,
                healthy=d.health,
                custom_info=dict(d.custom_info),
            ),
            d.used,
            d.usedmem,
            d.usedcores,
        )
        for d in devices
    ]


def run_fit(case: FitCase, adapter, quota=None, namespace: str = "default"):
    """The vendor's Fit (its hook, or the standard Fit) on the case, as HAMi's test calls
    it: devices in the given order, the pod's annotations read for filters and policy."""
    from dra_driver.engine.fit import fit_request
    from dra_driver.engine.model import Node
    from dra_driver.engine.policy import parse_gpu_policy
    from dra_driver.engine.requests import DEFAULT_WEIGHTS, DeviceRequest
    from dra_driver.engine.vendors import FitContext, VendorRegistry
    from dra_driver.objects.pod_workloads import vendor_filters

    slots = slots_of(case.devices)
    request = DeviceRequest(
        vendor=case.request.type,
        count=case.request.nums,
        memory_mib=case.request.memreq,
        memory_percent=case.request.mempct,
        cores=case.request.coresreq,
        filters=vendor_filters(adapter, case.annotations),
    )
    policy = parse_gpu_policy(case.annotations.get("hami.io/gpu-scheduler-policy", "spread"))
    ctx = FitContext(
        Node("n", tuple(s.device for s in slots)),
        namespace,
        policy,
        DEFAULT_WEIGHTS,
        VendorRegistry([adapter]),
        quota,
    )
    fit = adapter.fit or fit_request
    return fit(slots, request, ctx, [])


def as_hami(request) -> HamiRequest:
    """A DeviceRequest (or None) in HAMi's ContainerDeviceRequest terms."""
    if request is None:
        return NO_REQUEST
    return HamiRequest(
        request.count, request.vendor, request.memory_mib, request.memory_percent, request.cores
    )
