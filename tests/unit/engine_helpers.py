"""Small builders shared by the engine tests."""

from __future__ import annotations

from dra_driver.engine.engine import Engine, EngineSettings
from dra_driver.engine.model import Device, DeviceUsage, Node
from dra_driver.engine.quota import QuotaLedger
from dra_driver.engine.requests import (
    MEMORY_PERCENT_UNSET,
    DeviceFilters,
    DeviceRequest,
    PodRequest,
)

A100 = "NVIDIA-A100-SXM4-80GB"


def gpu(index: int, *, node: str = "n", memory: int = 81920, count: int = 10, **kw) -> Device:
    return Device(
        id=kw.pop("id", f"GPU-{node}-{index}"),
        index=index,
        type=kw.pop("type", A100),
        count=count,
        memory_mib=memory,
        cores=kw.pop("cores", 100),
        **kw,
    )


def node(name: str, gpus: int = 2, **kw) -> Node:
    devices = kw.pop("devices", None) or tuple(gpu(i, node=name) for i in range(gpus))
    return Node(name=name, devices=tuple(devices), **kw)


def req(
    count: int = 1,
    memory: int = 0,
    cores: int = 0,
    percent: int = MEMORY_PERCENT_UNSET,
    filters: DeviceFilters | None = None,
    vendor: str = "NVIDIA",
) -> DeviceRequest:
    return DeviceRequest(
        vendor=vendor,
        count=count,
        memory_mib=memory,
        memory_percent=percent,
        cores=cores,
        filters=filters or DeviceFilters(),
    )


def pod(*containers, init=(), gpu_policy=None, node_policy=None, namespace="default") -> PodRequest:
    return PodRequest(
        namespace=namespace,
        name="p",
        containers=tuple(tuple(c) if isinstance(c, list | tuple) else (c,) for c in containers),
        init_containers=tuple(tuple(c) if isinstance(c, list | tuple) else (c,) for c in init),
        gpu_policy=gpu_policy,
        node_policy=node_policy,
    )


def engine(
    *nodes: Node,
    usage: dict[str, dict[str, DeviceUsage]] | None = None,
    quota: QuotaLedger | None = None,
    gpu_policy: str = "spread",
    node_policy: str = "binpack",
) -> Engine:
    return Engine(
        nodes,
        usage,
        settings=EngineSettings(gpu_policy=gpu_policy, node_policy=node_policy),
        quota=quota,
    )
