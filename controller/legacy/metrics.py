"""HAMi's scheduler metrics for the legacy scheduler, from its own cache.

The collector and the series (`hami_gpu_*`, `hami_vgpu_*`, `zone="vGPU"`) are
the controller's (`controller.metrics`); this module only builds the view it
reads: the registered nodes, usage per device and one share per container
and device, all from the legacy ClusterState, at scrape time.
"""

from __future__ import annotations

from api.quantity import MIB
from controller.inventory import Inventory
from controller.legacy.cluster import ClusterState
from controller.metrics import ShareRecord, ViewSnapshot
from dra_driver.engine.model import DeviceUsage


def legacy_view(state: ClusterState) -> ViewSnapshot:
    nodes = {name: entry.node for name, entry in state.inventory.items() if entry.node}
    usage: dict[str, dict[str, DeviceUsage]] = {}
    shares: list[ShareRecord] = []
    for allocation in state.allocations.values():
        placement = allocation.placement
        per_node = usage.setdefault(placement.node, {})
        for device, amount in allocation.usage.items():
            per_node[device] = per_node.get(device, DeviceUsage()).plus(amount)
        for index, container in enumerate(placement.containers):
            shares.extend(
                ShareRecord(
                    namespace=allocation.namespace,
                    node=placement.node,
                    pod=allocation.name,
                    container_index=index,
                    device_uuid=grant.uuid,
                    memory_bytes=grant.memory_mib * MIB,
                    cores=grant.cores,
                )
                for grant in container
            )
    inventory = Inventory(nodes=nodes, duplicate_uuids=state.uuids.duplicates())
    return ViewSnapshot(inventory, usage, shares)
