"""Typed settings of the DRA controller, one dataclass, each field with unit and why."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dra_driver.engine.policy import BINPACK, SPREAD
from dra_driver.kube.informer import InformerSettings
from dra_driver.objects.claim_workloads import DEVICE_CLASSES, DRIVER_NAME
from dra_driver.objects.dra_vendors import NVIDIA
from dra_driver.objects.mig_devices import PARTITION_CLASS

ALLOCATION_TAINT_KEY = "vgpu.hami.io/allocation"
"""The kubelet plugin's `--controller-allocated` device taint (value `controller`)."""


def controller_classes() -> dict[str, str]:
    """The classes the controller serves by default: every vendor's share class and the
    MIG partition class (its requests go to controller/partitions.py, not the engine)."""
    return {**DEVICE_CLASSES, PARTITION_CLASS: NVIDIA.request_type}


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    driver: str = DRIVER_NAME
    device_classes: Mapping[str, str] = field(default_factory=controller_classes)
    """DeviceClass name -> vendor: claims of these classes are this controller's."""

    partition_classes: frozenset[str] = frozenset({PARTITION_CLASS})
    """Those of `device_classes` whose requests are whole MIG partitions, not shares."""

    allocation_taint_key: str = ALLOCATION_TAINT_KEY
    """Our own device taint: it keeps kube-scheduler off, not the controller."""

    allocate_standalone_claims: bool = False
    """Also allocate claims of our classes that no pod refers to (on any node that fits);
    off by default: a claim is allocated when a pod needs it, on that pod's node."""

    mixed_mode: bool = False
    """The cluster's nodes also serve their GPUs to legacy (device-plugin) pods: count
    their HAMi annotations as usage and write allocations under HAMi's node lock, so
    the extender and this controller never hand out the same share (controller/mixed_usage.py)."""

    gpu_policy: str = SPREAD
    """HAMi's `--gpu-scheduler-policy` default; a pod or VGPUConfig may override."""

    node_policy: str = BINPACK
    """HAMi's `--node-scheduler-policy` default."""

    write_concurrency: int = 16
    """Pods whose allocations are being written at once; decisions stay serial."""

    retry_initial_s: float = 0.5
    """First wait before retrying a pod that did not fit or whose write failed; doubles."""

    retry_max_s: float = 30.0
    """Upper bound of that wait."""

    write_attempts: int = 5
    """Tries per API write on 409 (refresh) or 5xx/429/timeouts (backoff) before undoing."""

    write_retry_s: float = 0.05
    """First pause after a 429/5xx/timeout while writing a claim; doubles per attempt."""

    write_retry_max_s: float = 2.0

    moved_node_memory_s: float = 300.0
    """How long a node stays excluded for a pod that could not go there (seconds)."""

    release_after_freed_objects: int = 1000
    """Pods and claims the view must have shed since its high mark before the freed
    memory is given back to the system, once nothing changed for a second
    (controller/burst_end.py); 0 gives it back after every quiet second that follows
    a deletion."""

    informer: InformerSettings = field(default_factory=InformerSettings)
