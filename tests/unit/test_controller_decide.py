"""The decision step: the engine's placement, or every node's reasons in HAMi's words."""

from __future__ import annotations

from controller.decide import MAX_EVENT_MESSAGE, NoFit, decide_pod, no_fit_message
from controller.inventory import Inventory, PublishedDevice
from controller.requests import ClaimVariant, PodVariant
from dra_driver.engine.engine import Engine
from dra_driver.engine.model import Device, Node
from dra_driver.engine.requests import DeviceRequest, PodRequest

CAPACITY = {
    "memory": {"value": "16Gi"},
    "cores": {"value": "100"},
    "shares": {"value": "10", "requestPolicy": {"default": "1", "validValues": ["1"]}},
}


def cluster(nodes: int) -> tuple[Engine, Inventory]:
    inventory = Inventory()
    for n in range(nodes):
        name = f"node-{n}"
        spec = {"name": "gpu-0", "allowMultipleAllocations": True, "capacity": CAPACITY}
        device = PublishedDevice("vgpu.hami.io", name, name, spec, "s", 1, f"GPU-{n}")
        inventory.by_node_uuid[(device.node, device.uuid)] = device
        inventory.by_key[device.key] = device
        inventory.nodes[name] = Node(name, (Device(f"GPU-{n}", 0, "NVIDIA-A100", 10, 16384, 100),))
    return Engine(inventory.nodes.values()), inventory


def variant(memory_mib: int) -> PodVariant:
    container = (DeviceRequest("NVIDIA", 1, memory_mib=memory_mib),)
    claim = ClaimVariant({"spec": {}}, (container,), ("gpu",), ("c",), None, None)
    return PodVariant(PodRequest("ns", "p", (container,)), (claim,))


def test_a_fit_is_planned_with_every_capacity() -> None:
    engine, inventory = cluster(2)
    outcome = decide_pod(engine, [variant(1024)], inventory, ["node-0", "node-1"], {})
    assert not isinstance(outcome, NoFit)
    [[result]] = outcome.results
    assert result.request == "gpu" and set(result.consumed or {}) == {"memory", "cores", "shares"}


def test_no_fit_keeps_predicate_refusals_and_the_engines_reasons() -> None:
    engine, inventory = cluster(2)
    outcome = decide_pod(
        engine, [variant(32768)], inventory, ["node-1"], {"node-0": "Insufficient cpu"}
    )
    assert isinstance(outcome, NoFit)
    assert outcome.reasons == {"node-0": "Insufficient cpu", "node-1": "1/1 CardInsufficientMemory"}
    assert outcome.message.startswith("no available node, 2 nodes do not meet")
    assert "node-1: 1/1 CardInsufficientMemory" in outcome.message


def test_the_message_is_bounded() -> None:
    reasons = {f"node-{i:04d}": "8/8 CardInsufficientMemory" for i in range(500)}
    message = no_fit_message(reasons)
    assert len(message) == MAX_EVENT_MESSAGE and message.endswith("...")
