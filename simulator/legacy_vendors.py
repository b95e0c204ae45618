"""The legacy cluster's other vendors: their nodes, the scheduler's device config, the report.

A node of a family other than NVIDIA gets the stand-in for its vendor's own
device plugin (`simulator.standins.vendor_deviceplugin`); the legacy scheduler
runs the device config deploy/ ships (`simulator/device-config.yaml`, a byte
copy of `deploy/components/legacy/device-config.yaml`) with HAMi's
`--enable-ascend` and `--enable-iluvatar` on, so every family is served; and
kube-scheduler's stand-in sends the extender every pod asking any vendor's
resources, as deploy/'s managedResources make the real one do.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from controller.legacy.command import VENDOR_FLAGS
from controller.legacy.config import DeviceConfig, parse_device_config
from dra_driver.engine.vendor_backends.base import VendorBackend
from dra_driver.engine.vendor_backends.registry import BackendRegistry
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.dra_vendors import dra_vendor
from simulator.identities import Identities, device_plugin, kubelet
from simulator.nodes import GPUS_PER_NUMA_NODE, register_node
from simulator.report import DeviceReport
from simulator.settings import ClusterShape, FamilyNode
from simulator.standins.vendor_deviceplugin import MockCard, VendorDevicePlugin, container_names

DEVICE_CONFIG_FILE = Path(__file__).with_name("device-config.yaml")
MIB = 1 << 20

LEGACY_BACKENDS: Mapping[str, str] = {
    "ascend": "Ascend910B3",
    "iluvatar": "BI-V100",
    "metax": "Metax-GPU",
}
"""A `--vendors` id whose legacy backend is not named by its DRA request type: Ascend and
Iluvatar have one backend per chip (the family's mock product), and Metax's node is a
whole-card one (Metax sGPU registers a JSON of its own, metax-tech.com/node-gpu-devices,
which the stand-in does not play)."""


def device_config(path: Path = DEVICE_CONFIG_FILE) -> DeviceConfig:
    """The `device-config.yaml` of the ConfigMap deploy/ installs."""
    config_map = yaml.safe_load(path.read_text())
    return parse_device_config(yaml.safe_load(config_map["data"]["device-config.yaml"]), str(path))


ENABLED_FLAGS = frozenset(VENDOR_FLAGS)
"""HAMi's switches for Ascend and Iluvatar, on: the simulated cluster has both."""


def legacy_backend(backends: BackendRegistry, vendor_id: str) -> VendorBackend:
    """The backend that serves a `--vendors` family in legacy mode."""
    family = dra_vendor(vendor_id, "--vendors")
    name = LEGACY_BACKENDS.get(vendor_id, family.request_type)
    backend = backends.get(name)
    if backend is None:
        raise InvalidParameterError("--vendors", f"{vendor_id}: no legacy backend {name!r}")
    return backend


def managed_resources(backends: BackendRegistry) -> tuple[str, ...]:
    """Every resource name of every backend, as deploy/'s managedResources lists them."""
    names: dict[str, None] = {}
    for backend in backends:
        r = backend.adapter.resources
        for name in (r.count, r.memory, r.memory_percentage, r.cores, r.priority):
            if name:
                names[name] = None
    return tuple(names)


def mock_cards(shape: ClusterShape, node: FamilyNode) -> list[MockCard]:
    """The family's mock cards (its DRA mock product and memory), uuids unique per node."""
    family = dra_vendor(node.vendor)
    prefix = node.vendor.upper()
    return [
        MockCard(
            uuid=f"{prefix}-5100e000-0000-4000-8000-{node.position:06x}{index:06x}",
            index=index,
            product=family.product,
            memory_mib=family.memory_bytes // MIB,
            numa=index // GPUS_PER_NUMA_NODE,
        )
        for index in range(shape.gpus_per_node)
    ]


async def start_vendor_node(
    identities: Identities, shape: ClusterShape, node: FamilyNode, backend: VendorBackend
) -> VendorDevicePlugin:
    """The node, registered by its kubelet, and its vendor plugin's stand-in, which
    writes as the node's device plugin (the identity deploy/'s policies allow)."""
    await register_node(await identities.client(kubelet(node.name)), node.name)
    plugin = VendorDevicePlugin(
        await identities.client(device_plugin(node.name)),
        node.name,
        backend,
        mock_cards(shape, node),
    )
    await plugin.register(shape.split_count)
    return plugin


def pod_devices(backends: BackendRegistry, pod: Mapping[str, Any]) -> list[DeviceReport]:
    """Each container's devices per vendor, read from every backend's allocated key."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    names = container_names(pod)
    found: list[DeviceReport] = []
    for backend in backends:
        for position, container in enumerate(backend.allocated_devices(annotations) or []):
            name = names[position] if position < len(names) else str(position)
            found += [
                DeviceReport(name, backend.name, d.uuid, d.type, d.usedmem, d.usedcores)
                for d in container
            ]
    return found
