"""Metax whole GPUs (request Type `Metax-GPU`) from the `metax:` section of device-config.yaml.

Where it differs from NVIDIA (reference/hami-vendors.md, HAMi's
`pkg/device/metax/device.go`): a pod asks only for a count of whole cards
(`{count, memory 0, 100 %, 100 cores}`); the devices are one per unit of
`node.status.capacity` (65536 MiB, 100 cores, one share each), healthy while
that capacity is above 0, with no handshake; there is no type or uuid
filter; the Fit is the standard one plus HAMi's customFilterRule keeping a
pod's devices on one card; there is no node lock; and the node score reads
the node's MetaLink topology: binpack prefers the lowest
`metax-tech.com/gpu.topology.losses[n]`, spread the highest
`metax-tech.com/gpu.topology.scores[n]`, both as `2000 - value` for the n
devices the pod takes. Those two annotations travel on each device's
`custom_info`, since the score sees the engine's node, not the Node object.
The sGPU backend of the same section (`Metax-SGPU`) is a vendor of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from pydantic import Field

from dra_driver.engine.fit import fit_request
from dra_driver.engine.grants import ContainerGrants
from dra_driver.engine.model import Node
from dra_driver.engine.policy import BINPACK, SPREAD
from dra_driver.engine.requests import ContainerRequest
from dra_driver.engine.vendor_backends.adapters import ConfigSection, vendor_keys, vendor_resources
from dra_driver.engine.vendor_backends.base import (
    NO_LOCK,
    BackendFamily,
    VendorBackend,
    VendorNodeDevices,
    annotations_of,
    whole_cards,
)
from dra_driver.engine.vendor_backends.mthreads import one_card_per_pod
from dra_driver.engine.vendors import VendorAdapter

METAX_GPU = "Metax-GPU"
CARD_MEMORY_MIB = 65536
CARD_CORES = 100
LOSSES = "metax-tech.com/gpu.topology.losses"
SCORES = "metax-tech.com/gpu.topology.scores"
TOPOLOGY_BASE = 2000


class MetaxConfig(ConfigSection):
    """The whole-card key of the `metax:` section (Go `MetaxConfig.ResourceCountName`)."""

    resource_count_name: str = Field("", alias="resourceCountName")


DEFAULT_SECTION = {"resourceCountName": "metax-tech.com/gpu"}


def topology_value(annotation: str | None, devices: int) -> int:
    """HAMi's parseMetaxAnnos: the JSON object's entry for `devices`; 0 when the
    annotation is missing, unreadable or has no such entry."""
    if not annotation:
        return 0
    try:
        table = json.loads(annotation)
    except ValueError:
        return 0
    value = table.get(str(devices)) if isinstance(table, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def topology_score(
    node: Node,
    grants: Sequence[ContainerGrants],
    container_requests: Sequence[ContainerRequest],
    node_policy: str,
) -> float:
    """HAMi's ScoreNode: `2000 - losses[n]` under binpack, `2000 - scores[n]` under
    spread, n the pod's Metax GPUs on the node; 0 without the annotation."""
    key = {BINPACK: LOSSES, SPREAD: SCORES}.get(node_policy)
    first = next((d for d in node.devices if d.type == METAX_GPU), None)
    if key is None or first is None or key not in first.custom_info:
        return 0.0
    taken = sum(1 for ctr in grants for grant in ctr if grant.vendor == METAX_GPU)
    return float(TOPOLOGY_BASE - topology_value(first.custom_info[key], taken))


def adapter(config: MetaxConfig) -> VendorAdapter:
    """The engine's view: whole cards by NVIDIA's reading, one card per pod, topology score."""
    return VendorAdapter(
        name=METAX_GPU,
        common_word=METAX_GPU,
        resources=vendor_resources(config.resource_count_name),
        annotations=vendor_keys(
            to_allocate="hami.io/metax-gpu-devices-to-allocate",
            allocated="hami.io/metax-gpu-devices-allocated",
        ),
        default_count=0,
        default_cores=CARD_CORES,
        fit=partial(fit_request, custom_rule=one_card_per_pod),
        score=topology_score,
    )


class MetaxGpuBackend(VendorBackend):
    """HAMi's Metax GPU backend with one `metax:` section's count name."""

    def __init__(self, config: MetaxConfig | None = None) -> None:
        self.config = config or MetaxConfig.model_validate(DEFAULT_SECTION)
        super().__init__(adapter(self.config), register_key=None, handshake_key=None, lock=NO_LOCK)

    def node_devices(
        self, node: Mapping[str, Any], now: datetime, handshake_timeout: timedelta
    ) -> VendorNodeDevices:
        """GetNodeDevices and CheckHealth: one whole card per unit of capacity."""
        annotations = annotations_of(node)
        topology = {key: annotations[key] for key in (LOSSES, SCORES) if key in annotations}
        return whole_cards(
            node,
            self.adapter,
            "metax",
            memory_mib=CARD_MEMORY_MIB,
            cores=CARD_CORES,
            custom_info=topology,
        )


FAMILY = BackendFamily(
    section="metax",
    model=MetaxConfig,
    build=lambda config: (MetaxGpuBackend(config),),
    default=DEFAULT_SECTION,
    name="metax-gpu",
)
