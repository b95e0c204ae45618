"""Decision time in this process, as CPU time: what the controller's histogram measures,
without the waits a loaded 2-core machine adds to it.

The controller observes `vgpu_controller_decision_seconds` in wall time. With the
emulator, the stand-ins and other work on the same two cores, a decision of about a
millisecond is often preempted for several, and its tail shows the machine rather
than the code. This replays the controller's decision path (controller.requests'
pod_variants and controller.decide's decide_pod over the inventory built from the same
slices, the real DeviceClass selectors, then the engine's commit) for the bench's
claims and times each decision with `time.thread_time()` (CPU time of this thread),
next to its wall time. The cyclic garbage collector is left on, as in the controller.
"""

from __future__ import annotations

import time
from typing import Any

from controller_bench_cluster import DRIVER, SIZES_GIB, SLICE_SETTINGS, claim_spec, percentile

from controller.decide import PodAllocation, decide_pod
from controller.inventory import PublishedDevice, build_inventory
from controller.requests import RequestContext, pod_variants
from controller.settings import ControllerSettings
from dra_driver.engine.engine import Engine, EngineSettings
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.objects.dra_cel import CelDevice, cel_device_from_slice
from dra_driver.objects.dra_cel_cache import SelectorCache
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import build_resource_slices
from simulator.deviceclasses import device_classes


def _slices(nodes: int, gpus: int) -> list[dict[str, Any]]:
    slices = []
    for n in range(nodes):
        devices = [
            GpuInfo(f"GPU-{n:04d}-{i}", i, i, "NVIDIA A100-SXM4-80GB", 80 << 30, i // 4)
            for i in range(gpus)
        ]
        for item in build_resource_slices(f"node-{n:04d}", f"uid-{n}", devices, SLICE_SETTINGS, 1):
            item["metadata"].update(uid=f"slice-{n}", generation=1)
            slices.append(item)
    return slices


def replay_decisions(nodes: int, gpus: int, pods: int) -> str:
    """`pods` decisions on a fresh engine; one line with CPU and wall p50/p99."""
    settings = ControllerSettings()
    inventory = build_inventory(
        _slices(nodes, gpus), DRIVER, frozenset({settings.allocation_taint_key})
    )
    vendors = VendorRegistry()
    engine = Engine(
        inventory.nodes.values(),
        {},
        settings=EngineSettings(settings.gpu_policy, settings.node_policy),
        vendors=vendors,
    )
    selectors = SelectorCache()
    cel_devices: dict[tuple[str, int, str], CelDevice] = {}

    def selector_match(expression: str, device: PublishedDevice) -> bool:
        cel_device = cel_devices.get(device.cache_key)
        if cel_device is None:
            cel_device = cel_devices[device.cache_key] = cel_device_from_slice(
                device.driver, device.spec
            )
        return selectors.matches(expression, device.cache_key, cel_device)

    context = RequestContext(
        driver=DRIVER,
        device_classes=settings.device_classes,
        classes={c["metadata"]["name"]: c for c in device_classes()},
        inventory=inventory,
        selector_match=selector_match,
        vendors=vendors,
    )
    candidates = set(inventory.nodes)
    cpu: list[float] = []
    wall: list[float] = []
    first_wall = 0.0
    for i in range(pods):
        name = f"replay-{i:05d}"
        pod = {"metadata": {"name": name, "namespace": "default", "uid": f"pod-{i}"}, "spec": {}}
        claim = {
            "metadata": {"name": name, "namespace": "default", "uid": f"claim-{i}"},
            "spec": claim_spec(SIZES_GIB[i % len(SIZES_GIB)]),
        }
        started_cpu, started_wall = time.thread_time(), time.perf_counter()
        outcome = decide_pod(engine, pod_variants(pod, [claim], context), inventory, candidates, {})
        cpu.append(time.thread_time() - started_cpu)
        wall.append(time.perf_counter() - started_wall)
        if i == 0:
            first_wall = wall[0]
        if not isinstance(outcome, PodAllocation):
            raise RuntimeError(f"replay pod {name} fits nowhere: {outcome.message[:200]}")
        engine.commit(outcome.variant.request, outcome.placement)
    steady_cpu, steady_wall = cpu[1:], wall[1:]
    return (
        f"decision replayed in the bench process ({pods} pods, {nodes} x {gpus}): CPU time "
        f"p50 {percentile(steady_cpu, 0.5) * 1000:.2f} ms, p99 "
        f"{percentile(steady_cpu, 0.99) * 1000:.2f} ms; wall p50 "
        f"{percentile(steady_wall, 0.5) * 1000:.2f} ms, p99 "
        f"{percentile(steady_wall, 0.99) * 1000:.2f} ms; the first (selectors over every "
        f"device) {first_wall * 1000:.0f} ms"
    )
